#include "train/dist.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "tensor/error.h"

#ifdef ATTEND_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (the C++ bindings are deprecated)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace attend::train {

namespace {

// The number of processes a launcher says it started (OpenMPI, PMI, PMIx), or 0 when no
// launcher started this one.
int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(var); v && *v) return std::max(1, std::atoi(v));
  return std::getenv("PMIX_RANK") ? 1 : 0;
}

bool mpi_started = false;

#ifdef ATTEND_MPI
// Ends the process when a blocking collective takes longer than the deadline: a peer that
// hangs must not hang the job. One thread per process, idle unless a collective is open.
class Watchdog {
 public:
  explicit Watchdog(int rank) : rank_(rank), thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(m_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void arm(double seconds, std::string what) {
    std::lock_guard<std::mutex> l(m_);
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(seconds));
    what_ = std::move(what);
    seconds_ = seconds;
    armed_ = true;
    cv_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> l(m_);
    armed_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(m_);
    while (!quit_) {
      if (!armed_) {
        cv_.wait(l);
        continue;
      }
      if (cv_.wait_until(l, deadline_) == std::cv_status::timeout && armed_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr,
                     "attend: rank %d: %s: no answer within %.0f s (that rank is hung, too "
                     "slow, or gone); ending the job\n",
                     rank_, what_.c_str(), seconds_);
        std::fflush(stderr);
        // Give mpirun a moment to forward the message: once it sees a rank exit it ends
        // the job, and output still in flight can be lost.
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        // Without MPI_Finalize: mpirun sees the exit and ends the other ranks.
        std::_Exit(1);
      }
    }
  }

  int rank_;
  std::mutex m_;
  std::condition_variable cv_;
  std::chrono::steady_clock::time_point deadline_{};
  std::string what_;
  double seconds_ = 0;
  bool armed_ = false, quit_ = false;
  std::thread thread_;
};

Watchdog* watchdog = nullptr;

// Arms the watchdog for one collective.
class Watch {
 public:
  Watch(const Dist& d, const std::string& what) {
    if (watchdog) watchdog->arm(d.timeout_s, str(d.where.empty() ? "" : d.where + ": ", what));
  }
  ~Watch() {
    if (watchdog) watchdog->disarm();
  }
};

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

constexpr int64_t kChunk = int64_t{1} << 28;  // elements per MPI call (its counts are int)

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(str("MPI ", what, " failed: ", std::string(text, static_cast<size_t>(len))));
}
#endif

}  // namespace

bool Dist::built_with_mpi() {
#ifdef ATTEND_MPI
  return true;
#else
  return false;
#endif
}

Dist& Dist::world() {
  static Dist* d = [] {
    auto* w = new Dist();
    const int launched = launcher_world_size();
#ifdef ATTEND_MPI
    if (launched > 0) {
      // Ranks waiting on each other yield their core (mpirun --oversubscribe does this too).
      ::setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      MPI_Comm_rank(MPI_COMM_WORLD, &w->rank_);
      MPI_Comm_size(MPI_COMM_WORLD, &w->size_);
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      mpi_started = true;
      if (w->size_ > 1) watchdog = new Watchdog(w->rank_);
    }
#else
    if (launched > 1)
      throw Error(
          str("this attend was built without MPI, but an MPI launcher started it as one "
              "of ",
              launched,
              " processes; install libopenmpi-dev and rebuild (cmake finds MPI), or "
              "run one process"));
#endif
    return w;
  }();
  return *d;
}

void Dist::finalize() {
#ifdef ATTEND_MPI
  if (!mpi_started) return;
  delete watchdog;
  watchdog = nullptr;
  MPI_Finalize();
  mpi_started = false;
#endif
}

void check_world_size(int world, int64_t micro_steps) {
  const bool power_of_two = world > 0 && (world & (world - 1)) == 0;
  ATTEND_CHECK(power_of_two && micro_steps % world == 0, "--gradient_accumulation_steps ",
               micro_steps, " with ", world,
               " processes: the number of processes must be a power of two that divides "
               "gradient_accumulation_steps (each runs an equal block of the micro-steps, "
               "summed in one fixed tree; see the README's \"Several machines\")");
}

template <typename T>
void Dist::sum_blocks_impl([[maybe_unused]] T* data, [[maybe_unused]] int64_t n) {
#ifdef ATTEND_MPI
  if (size_ == 1) return;
  check_world_size(size_, size_);
  // Reduce-scatter by recursive halving: after the level at distance d, rank r holds on
  // its segment the sum over the 2d ranks that agree with it above bit log2(d).
  std::vector<std::pair<int64_t, int64_t>> segments;  // [begin, end) before each level
  int64_t b = 0, e = n;
  std::vector<T> in(static_cast<size_t>((n + 1) / 2));
  for (int d = 1; d < size_; d <<= 1) {
    segments.emplace_back(b, e);
    const int partner = rank_ ^ d;
    const int64_t mid = b + (e - b) / 2;
    const bool lower = (rank_ & d) == 0;
    const int64_t keep_b = lower ? b : mid, keep_e = lower ? mid : e;
    const int64_t send_b = lower ? mid : b, send_e = lower ? e : mid;
    Watch w(*this, str("summing gradients with rank ", partner));
    for (int64_t k = 0; k < std::max(keep_e - keep_b, send_e - send_b); k += kChunk) {
      const int ns = static_cast<int>(std::clamp<int64_t>(send_e - send_b - k, 0, kChunk));
      const int nr = static_cast<int>(std::clamp<int64_t>(keep_e - keep_b - k, 0, kChunk));
      check_mpi(MPI_Sendrecv(data + send_b + k, ns, mpi_type<T>(), partner, 1, in.data() + k, nr,
                             mpi_type<T>(), partner, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                "Sendrecv (reduce-scatter)");
    }
    for (int64_t i = keep_b; i < keep_e; ++i) data[i] += in[static_cast<size_t>(i - keep_b)];
    b = keep_b, e = keep_e;
  }
  // All-gather by recursive doubling: undo the halvings, last first.
  for (int d = size_ >> 1; d >= 1; d >>= 1) {
    const auto [pb, pe] = segments.back();
    segments.pop_back();
    const int partner = rank_ ^ d;
    const int64_t mid = pb + (pe - pb) / 2;
    const bool lower = (rank_ & d) == 0;
    const int64_t other_b = lower ? mid : pb, other_e = lower ? pe : mid;
    Watch w(*this, str("gathering gradients from rank ", partner));
    for (int64_t k = 0; k < std::max(e - b, other_e - other_b); k += kChunk) {
      const int ns = static_cast<int>(std::clamp<int64_t>(e - b - k, 0, kChunk));
      const int nr = static_cast<int>(std::clamp<int64_t>(other_e - other_b - k, 0, kChunk));
      check_mpi(MPI_Sendrecv(data + b + k, ns, mpi_type<T>(), partner, 2, data + other_b + k, nr,
                             mpi_type<T>(), partner, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                "Sendrecv (all-gather)");
    }
    b = pb, e = pe;
  }
#endif
}

void Dist::sum_blocks(float* data, int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  sum_blocks_impl(data, n);
  exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
void Dist::sum_blocks(double* data, int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  sum_blocks_impl(data, n);
  exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#ifdef ATTEND_MPI
namespace {

// All-reduce by recursive doubling (W a power of two): at distance d = 1, 2, 4 ... each
// rank swaps its whole vector with rank ^ d and combines. Point to point, so a timeout
// names the rank that did not answer.
template <typename T, typename Combine>
void doubling_allreduce(const Dist& d, T* v, int n, MPI_Datatype type, Combine combine,
                        const char* what) {
  std::vector<T> in(static_cast<size_t>(n));
  for (int dist = 1; dist < d.size(); dist <<= 1) {
    const int partner = d.rank() ^ dist;
    Watch w(d, str(what, " with rank ", partner));
    check_mpi(MPI_Sendrecv(v, n, type, partner, 3, in.data(), n, type, partner, 3, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE),
              what);
    for (int i = 0; i < n; ++i) v[i] = combine(v[i], in[static_cast<size_t>(i)]);
  }
}

bool power_of_two(int w) { return w > 0 && (w & (w - 1)) == 0; }

}  // namespace
#endif

void Dist::sum_disjoint([[maybe_unused]] std::vector<double>& v) {
#ifdef ATTEND_MPI
  if (size_ == 1) return;
  if (power_of_two(size_)) {
    doubling_allreduce(
        *this, v.data(), static_cast<int>(v.size()), MPI_DOUBLE,
        [](double a, double b) { return a + b; }, "summing losses");
    return;
  }
  Watch w(*this, "summing losses across ranks");
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM,
                          MPI_COMM_WORLD),
            "Allreduce (losses)");
#endif
}

int Dist::max(int v) {
#ifdef ATTEND_MPI
  if (size_ == 1) return v;
  if (power_of_two(size_)) {
    doubling_allreduce(
        *this, &v, 1, MPI_INT, [](int a, int b) { return std::max(a, b); },
        "agreeing whether to stop");
    return v;
  }
  Watch w(*this, "agreeing with the other ranks whether to stop");
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD),
            "Allreduce (stop)");
#endif
  return v;
}

void Dist::broadcast([[maybe_unused]] void* data, [[maybe_unused]] size_t bytes) {
#ifdef ATTEND_MPI
  if (size_ == 1) return;
  Watch w(*this, "waiting for rank 0's state (broadcast)");
  auto* p = static_cast<char*>(data);
  for (size_t k = 0; k < bytes; k += static_cast<size_t>(kChunk)) {
    const int nb = static_cast<int>(std::min<size_t>(bytes - k, static_cast<size_t>(kChunk)));
    check_mpi(MPI_Bcast(p + k, nb, MPI_BYTE, 0, MPI_COMM_WORLD), "Bcast");
  }
#endif
}

void Dist::broadcast(std::string& s) {
  if (size_ == 1) return;
  uint64_t n = s.size();
  broadcast(&n, sizeof n);
  s.resize(n);
  broadcast(s.data(), n);
}

void Dist::abort(const std::string& message, [[maybe_unused]] int code) {
  std::fprintf(stderr, "attend: rank %d of %d: %s\n", rank_, size_, message.c_str());
  std::fflush(stderr);
#ifdef ATTEND_MPI
  if (mpi_started && size_ > 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let mpirun forward it
    MPI_Abort(MPI_COMM_WORLD, code);
  }
#endif
  std::_Exit(code);
}

}  // namespace attend::train
