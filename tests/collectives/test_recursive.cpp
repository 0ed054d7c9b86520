// Placeholder: the recursive schedule tests are being written.
#include <catch2/catch.hpp>
