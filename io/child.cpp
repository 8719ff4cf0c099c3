#include "io/child.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tensor/error.h"

namespace attend::io {

// Note [HDF5 in a child process]
// HDF5 is not safe against every bad file or fault, so attend never lets it fail inside
// the main process:
// - Writing: after a full disk (or a file-size limit) H5Fclose fails, the file stays
//   registered half closed, and any later close, HDF5's own exit handler included,
//   crashes (SIGSEGV in H5F__close_cb).
// - Reading: a corrupt or crafted file can crash HDF5's parser itself (our fuzzer found
//   a SIGSEGV in H5Lget_name_by_idx on damaged dense link storage), or loop.
// So the file is written, and first read through, by a forked child that shares memory
// copy-on-write, runs only HDF5 and our checks (no OpenMP, no logging), has a time limit
// (alarm), and leaves with _exit; its status and, on failure, its error message come back
// through a pipe. Whatever HDF5 does, this process stays sound: a crash or a hang of the
// child is an error naming the file. (Reading twice costs one more read of a file the
// page cache already holds; the child's memory is gone before the real read.)
std::string run_in_child(const std::function<void()>& work, unsigned timeout_s) {
  int fds[2];
  ATTEND_CHECK(::pipe(fds) == 0, "checkpoint: cannot create a pipe: ", std::strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]), ::close(fds[1]);
    throw Error(str("checkpoint: cannot fork the writer: ", std::strerror(errno)));
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(timeout_s);
    std::string msg;
    try {
      work();
      ::_exit(0);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
      msg = "unknown error";
    }
    for (size_t done = 0; done < msg.size();) {
      const ssize_t n = ::write(fds[1], msg.data() + done, msg.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(1);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    msg.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    return str("HDF5 did not finish within ", timeout_s, " s");
  if (WIFSIGNALED(status))
    return str("HDF5 crashed (signal ", WTERMSIG(status), ")", msg.empty() ? "" : ": ", msg);
  return msg.empty() ? std::string("HDF5 failed") : msg;
}

}  // namespace attend::io
