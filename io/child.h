// Running work in a forked child process, so that a crash or hang inside it (HDF5 on a
// bad file or a full disk) cannot take this process down. See Note [HDF5 in a child
// process] in child.cpp.
#pragma once

#include <functional>
#include <string>

namespace attend::io {

// Runs work() in a forked child (memory shared copy-on-write) with an alarm of timeout_s
// seconds; returns "" when it returned normally, else what went wrong: its exception's
// message, or that it crashed (the signal) or ran out of time.
std::string run_in_child(const std::function<void()>& work, unsigned timeout_s);

}  // namespace attend::io
