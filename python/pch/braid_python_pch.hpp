// The headers every file of the extension includes, precompiled once
// (pybind11's alone take most of each file's compile time).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "braid/braid.hpp"
#include "braid/mirrored.hpp"
