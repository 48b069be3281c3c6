// The parent's side of a measurement: run this executable again with --run-one NAME and read its one result
// line. A process per configuration gives each one its own peak RSS, and a crash (or the OOM killer) costs one
// row, not the run. fork() is followed straight by exec(): LibTorch's OpenMP pool does not survive a bare fork.

#include "bench.h"

#include <fmt/core.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace bench {
namespace {

constexpr const char* kResultTag = "attn-bench-result";
constexpr const char* kErrorTag = "attn-bench: error: ";
constexpr size_t kStderrTail = 600;  // characters of a failed child's stderr kept in its error row

// Reads both pipes until the child closes them; reading one at a time could deadlock on a full other pipe.
void drain(int out_fd, int err_fd, std::string& out, std::string& err) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  int open = 2;
  char buffer[4096];
  while (open > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;  // poll ignores negative descriptors
        --open;
      }
    }
  }
}

// The error message the child printed, if it printed one.
std::optional<std::string> child_error_message(const std::string& err) {
  const size_t tagged = err.rfind(kErrorTag);
  if (tagged == std::string::npos) return std::nullopt;
  return err.substr(tagged + std::strlen(kErrorTag));
}

// Text made fit for one row: no newlines, at most kStderrTail characters, keeping the head of a message or
// the tail of a crash's stderr (where the last words are).
std::string one_line(std::string text, bool keep_tail) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.size() > kStderrTail)
    text = keep_tail ? "..." + text.substr(text.size() - kStderrTail) : text.substr(0, kStderrTail) + "...";
  for (char& c : text)
    if (c == '\n') c = ' ';
  return text;
}

}  // namespace

std::string format_result_line(const Measurement& m) {
  std::string alternated;
  if (!m.alternated_with.empty())
    alternated = fmt::format(" alternated_with={} peer_ms_median={:.17g} alternated_speedup={:.17g}",
                             m.alternated_with, m.peer_ms_median, m.alternated_speedup);
  return fmt::format("{} ms_median={:.17g} peak_rss_mib={:.3f} base_rss_mib={:.3f} threads={}{}\n", kResultTag,
                     m.ms_median, m.peak_rss_mib, m.base_rss_mib, m.threads, alternated);
}

std::optional<Measurement> parse_result_line(const std::string& stdout_text) {
  const size_t at = stdout_text.rfind(kResultTag);
  if (at == std::string::npos) return std::nullopt;
  const size_t start = at + std::strlen(kResultTag), end = stdout_text.find('\n', at);
  std::istringstream line(stdout_text.substr(start, end == std::string::npos ? end : end - start));
  Measurement m;
  int found = 0;
  for (std::string field; line >> field;) {
    const size_t eq = field.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    try {
      if (key == "ms_median") m.ms_median = std::stod(value), ++found;
      else if (key == "peak_rss_mib") m.peak_rss_mib = std::stod(value), ++found;
      else if (key == "base_rss_mib") m.base_rss_mib = std::stod(value), ++found;
      else if (key == "threads") m.threads = std::stoi(value), ++found;
      else if (key == "alternated_with") m.alternated_with = value;
      else if (key == "peer_ms_median") m.peer_ms_median = std::stod(value);
      else if (key == "alternated_speedup") m.alternated_speedup = std::stod(value);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (found != 4) return std::nullopt;
  return m;
}

ChildOutcome run_child(const std::string& argv0, const std::vector<std::string>& args) {
  // Everything the child needs is prepared before fork: between fork and exec only async-signal-safe calls.
  std::vector<std::string> storage{argv0};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]), close(out_pipe[1]);
    throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  }

  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    // dup2 clears O_CLOEXEC on the copies, so only stdout and stderr survive exec.
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execv("/proc/self/exe", argv.data());
    const char message[] = "attn-bench: error: cannot exec /proc/self/exe\n";
    (void)!write(STDERR_FILENO, message, sizeof message - 1);
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);

  std::string out, err;
  drain(out_pipe[0], err_pipe[0], out, err);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error(fmt::format("waitpid: {}", std::strerror(errno)));

  ChildOutcome outcome;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    outcome.error = fmt::format("child killed by signal {} ({}){}", sig, strsignal(sig),
                                sig == SIGKILL ? ", perhaps out of memory" : "");
  } else if (WEXITSTATUS(status) != 0) {
    outcome.error = fmt::format("child exited with status {}", WEXITSTATUS(status));
  } else if (!(outcome.measurement = parse_result_line(out))) {
    outcome.error = "child printed no result line";
  }
  if (!outcome.error.empty()) {
    // An exception the child caught says it all; a crash gets the status and whatever it printed last.
    if (const auto message = child_error_message(err); message && WIFEXITED(status)) {
      outcome.error = one_line(*message, false);
    } else if (const std::string tail = one_line(err, true); !tail.empty()) {
      outcome.error += ": " + tail;
    }
    outcome.measurement.reset();
  }
  return outcome;
}

}  // namespace bench
