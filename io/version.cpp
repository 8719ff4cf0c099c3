#include "io/version.h"

namespace attend {
const char* version() { return ATTEND_VERSION; }
}  // namespace attend
