// Placeholder: the exchange schedule tests are being written.
#include <catch2/catch.hpp>
