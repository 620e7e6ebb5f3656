/* SPDX-License-Identifier: Apache-2.0 */
/*
 * version.c -- the version libsluice was built as, from the build (git describe, the
 * packager's version, or the project version; see cmake/version.cmake). A static string.
 */
#include "sluice.h"
#include "sluice_version.h"

const char *sluice_version(void) { return SLUICE_BUILD_VERSION; }
