// Placeholder: the trees schedule tests are being written.
#include <catch2/catch.hpp>
