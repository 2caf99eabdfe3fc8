/// @file version.hpp
/// collx version numbers.
#pragma once

/// Major version: changes when the public API or ABI breaks.
#define COLLX_VERSION_MAJOR 0
/// Minor version: new features, backwards compatible.
#define COLLX_VERSION_MINOR 1
/// Patch version: fixes only.
#define COLLX_VERSION_PATCH 0
/// Single comparable number: major * 10000 + minor * 100 + patch.
#define COLLX_VERSION (COLLX_VERSION_MAJOR * 10000 + COLLX_VERSION_MINOR * 100 + COLLX_VERSION_PATCH)
/// The version as a string literal, "major.minor.patch".
#define COLLX_VERSION_STRING "0.1.0"
