// attend's version, from CMake's project(VERSION).
#pragma once

namespace attend {
const char* version();
}
