// attend's version, from CMake's project(VERSION).
#pragma once

#pragma GCC visibility push(default)  // the API a shared build exports (docs/library.md)
namespace attend {
const char* version();
}
#pragma GCC visibility pop
