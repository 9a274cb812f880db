#pragma once
// Function mode's kernel compiler, its service (kiln/function/jit.hpp writes the kernels' source and is the API):
// the options and statistics, the target flags a kernel is built with, and the service that compiles each
// kernel with the system's C++ compiler on a background thread, caches it on disk by a digest of its source, the
// command and kiln's headers, and loads it.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#if __has_include(<dlfcn.h>) && __has_include(<unistd.h>) && __has_include(<sys/stat.h>)
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#define KILN_JIT_SUPPORTED 1
#else
#define KILN_JIT_SUPPORTED 0
#endif

#include "fused_group.hpp"

namespace kiln {

// How kiln::function compiles its fused elementwise groups.
enum class jit_mode {
    off,         // interpret them tile by tile (the default)
    background,  // compile each group on a background thread; interpret it until its kernel is ready
    blocking,    // compile each group when its function is first prepared for a signature; wait for it
};

struct jit_options {
    jit_mode mode = jit_mode::off;
    // The compiler; empty: $KILN_JIT_CXX, else g++ or clang++ (the family that compiled this program).
    std::string compiler;
    // Added to kiln's flags (e.g. "-I/opt/xsimd/include"); empty: $KILN_JIT_FLAGS.
    std::string flags;
    // Where sources, logs and shared objects go; empty: $KILN_JIT_CACHE, else $XDG_CACHE_HOME/kiln/jit,
    // ~/.cache/kiln/jit or /tmp/kiln-jit.
    std::string cache_dir;
    // kiln's include directory; empty: $KILN_JIT_INCLUDE, else the one this program was compiled against.
    std::string include_dir;
    // Headers that define op structs of your own, included by every kernel ("my_ops.hpp"). A group that uses an op
    // the kernel's source cannot name is interpreted (jit_stats().last_error says why).
    std::vector<std::string> includes;
};

struct jit_statistics {
    std::size_t requested = 0;   // groups that asked for a kernel
    std::size_t compiled = 0;    // kernels compiled in this process
    std::size_t from_disk = 0;   // kernels loaded from the disk cache
    std::size_t reused = 0;      // groups served by a kernel already loaded in this process
    std::size_t failed = 0;      // groups left interpreted because their kernel could not be built or loaded
    std::size_t pending = 0;     // kernels being compiled now
    double compile_seconds = 0;  // wall time spent compiling
    std::string last_error;      // why the last failure failed
};

namespace detail {

inline std::string jit_env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

inline jit_mode jit_mode_from_env() {
    const std::string v = jit_env("KILN_JIT");
    if (v == "background" || v == "1" || v == "on") return jit_mode::background;
    if (v == "blocking") return jit_mode::blocking;
    return jit_mode::off;
}

// 64-bit FNV-1a.
inline std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 1469598103934665603ull) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

inline std::string hex64(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// The target flags this program was compiled with, so that a kernel uses the same instructions (xsimd picks its
// batch width and its functions' code from them) and gives the same bits as the interpreter.
inline std::string jit_target_flags() {
    std::string f;
#if defined(__x86_64__) || defined(__i386__)
#ifdef __SSE4_1__
    f += " -msse4.1";
#endif
#ifdef __SSE4_2__
    f += " -msse4.2";
#endif
#ifdef __AVX__
    f += " -mavx";
#endif
#ifdef __AVX2__
    f += " -mavx2";
#endif
#ifdef __FMA__
    f += " -mfma";
#endif
#ifdef __F16C__
    f += " -mf16c";
#endif
#ifdef __AVX512F__
    f += " -mavx512f";
#endif
#ifdef __AVX512CD__
    f += " -mavx512cd";
#endif
#ifdef __AVX512BW__
    f += " -mavx512bw";
#endif
#ifdef __AVX512DQ__
    f += " -mavx512dq";
#endif
#ifdef __AVX512VL__
    f += " -mavx512vl";
#endif
#endif
#ifdef __STRICT_ANSI__
    f += " -std=c++20";
#else
    f += " -std=gnu++20";
#endif
    return f;
}

// A compiled group's entry: computes its exported members over elements [b, e) of its operands and outputs
// (pointers to element 0), with streaming stores when `stream`.
// (group_kernel and jit_slot are declared in fused_group.hpp.)

// (A class template on an unused int, like the functions below: only what a program calls is compiled, so
// including kiln/kiln.hpp does not pay for the compiler's machinery.)
template <int N = 0>
class basic_jit_service {
public:
    static basic_jit_service& instance() {
        static basic_jit_service s;
        return s;
    }

    jit_options options() {
        std::lock_guard lock(mu_);
        return opts_;
    }
    void set(jit_options o) {
        std::lock_guard lock(mu_);
        opts_ = std::move(o);
        stamp_.clear();
    }
    jit_mode mode() {
        std::lock_guard lock(mu_);
        return opts_.mode;
    }
    jit_statistics stats() {
        std::lock_guard lock(mu_);
        jit_statistics s = stats_;
        s.pending = pending_;
        return s;
    }
    void wait() {
        std::unique_lock lock(mu_);
        idle_.wait(lock, [&] { return pending_ == 0; });
    }

    // Asks for the kernel of `source` for `slot`: at once from this process's kernels or the disk cache, else
    // compiled now (blocking) or on the worker thread (background).
    void request(const std::shared_ptr<jit_slot>& slot, const std::string& source, jit_mode m, bool device = false) {
#if KILN_JIT_SUPPORTED
        std::unique_lock lock(mu_);
        ++stats_.requested;
        if (m == jit_mode::off) return;
        if (include_dir_locked().empty()) {
            ++stats_.failed;
            stats_.last_error = "kiln's headers (kiln/function/jit_kernel.hpp) were not found for the kernel compiler: "
                                "this program was compiled against '" + std::string(__FILE__) +
                                "', relative to where it was compiled; set KILN_JIT_INCLUDE or jit_options::include_dir";
            return;
        }
        const std::string cmd = command_locked(device);
        const std::string key = hex64(fnv1a(stamp_locked(), fnv1a(cmd, fnv1a(source))));
        slot->key = key;
        auto it = kernels_.find(key);
        if (it != kernels_.end()) {
            entry& e = it->second;
            if (e.fn) {
                ++stats_.reused;
                hand_over(*slot, e.fn, device);
                return;
            }
            if (!e.error.empty()) {
                ++stats_.failed;
                return;
            }
            e.waiting.push_back(slot);
            if (m == jit_mode::blocking) idle_.wait(lock, [&] { return e.done; });
            return;
        }
        entry& e = kernels_[key];
        e.waiting.push_back(slot);
        ++pending_;
        job j{key, source, cmd, opts_.cache_dir.empty() ? default_cache_dir() : opts_.cache_dir, device};
        if (m == jit_mode::blocking) {
            lock.unlock();
            build(j);
        } else {
            queue_.push_back(std::move(j));
            if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
            wake_.notify_one();
        }
#else
        (void)slot;
        (void)source;
        std::lock_guard lock(mu_);
        ++stats_.requested;
        if (m != jit_mode::off) {
            ++stats_.failed;
            stats_.last_error = "kiln::function's kernel compiler needs dlopen (POSIX); groups are interpreted";
        }
#endif
    }

    // A group left interpreted because its source cannot be written.
    void refuse(std::string why) {
        std::lock_guard lock(mu_);
        ++stats_.requested;
        ++stats_.failed;
        stats_.last_error = std::move(why);
    }

    ~basic_jit_service() {
        {
            std::lock_guard lock(mu_);
            stop_ = true;
            queue_.clear();
        }
        wake_.notify_all();
        if (worker_.joinable()) worker_.join();
    }

private:
    struct entry {
        void* fn = nullptr;  // a group_kernel, or a device_group_kernel for a device group
        std::string error;
        bool done = false;
        std::vector<std::weak_ptr<jit_slot>> waiting;
    };
    struct job {
        std::string key, source, command, dir;
        bool device = false;
    };

    static void hand_over(jit_slot& slot, void* fn, bool device) {
        if (device) slot.device_fn.store(reinterpret_cast<device_group_kernel>(fn), std::memory_order_release);
        else slot.fn.store(reinterpret_cast<group_kernel>(fn), std::memory_order_release);
    }

    basic_jit_service() { opts_.mode = jit_mode_from_env(); }

    static std::string default_cache_dir() {
        std::string d = jit_env("KILN_JIT_CACHE");
        if (!d.empty()) return d;
        d = jit_env("XDG_CACHE_HOME");
        if (!d.empty()) return d + "/kiln/jit";
        d = jit_env("HOME");
        if (!d.empty()) return d + "/.cache/kiln/jit";
        return "/tmp/kiln-jit";
    }

    static bool has_kernel_header(const std::string& dir) {
#if KILN_JIT_SUPPORTED
        struct stat st {};
        return ::stat((dir + "/kiln/function/jit_kernel.hpp").c_str(), &st) == 0;
#else
        (void)dir;
        return false;
#endif
    }

    // kiln's include directory: the option, $KILN_JIT_INCLUDE, the directory this header was compiled from (a
    // relative __FILE__ is relative to where the program was compiled, so it is tried from here), /usr/local/include,
    // /usr/include. Empty where none holds kiln's headers.
    std::string include_dir_locked() const {
        if (!opts_.include_dir.empty()) return opts_.include_dir;
        std::string d = jit_env("KILN_JIT_INCLUDE");
        if (!d.empty()) return d;
        // This header is <include>/kiln/function/jit_service.hpp.
        std::string f = __FILE__;
        for (int up = 0; up < 3 && !f.empty(); ++up) {
            const std::size_t s = f.find_last_of('/');
            f.erase(s == std::string::npos ? 0 : s);
        }
        for (const std::string& c : {f.empty() ? std::string(".") : f, std::string("/usr/local/include"), std::string("/usr/include")})
            if (has_kernel_header(c)) return c;
        return {};
    }

    // The command, without its input and output: the host compiler with this program's target flags; for a group
    // on kiln's GPU device, nvcc where this program was built for CUDA, else the host compiler on Thrust's OpenMP
    // system (the emulated device).
    std::string command_locked(bool device) const {
        std::string cxx = opts_.compiler.empty() ? jit_env("KILN_JIT_CXX") : opts_.compiler;
        if (cxx.empty()) {
#if defined(__clang__)
            cxx = "clang++";
#else
            cxx = "g++";
#endif
        }
        std::string flags = opts_.flags.empty() ? jit_env("KILN_JIT_FLAGS") : opts_.flags;
        if (device) {
#if defined(KILN_GPU_CUDA) && KILN_GPU_CUDA
            std::string nvcc = jit_env("KILN_JIT_NVCC");
            if (nvcc.empty() && ::access("/usr/local/cuda/bin/nvcc", X_OK) == 0) nvcc = "/usr/local/cuda/bin/nvcc";
            std::string arch = jit_env("KILN_JIT_CUDA_ARCH");
            return (nvcc.empty() ? std::string("nvcc") : nvcc) + " -std=c++20 -arch=" + (arch.empty() ? "sm_90" : arch) +
                   " -O2 -x cu -shared -Xcompiler -fPIC --expt-relaxed-constexpr -fmad=false -DNDEBUG -DKILN_GPU=1"
                   " -DKILN_FP_CONTRACT=0 -I'" + include_dir_locked() + "'" + (flags.empty() ? "" : " " + flags);
#else
            std::string cccl = jit_env("KILN_JIT_CCCL");
            return cxx + jit_target_flags() + " -O2 -DNDEBUG -ffp-contract=off -DKILN_FP_CONTRACT=0 -fPIC -shared -fopenmp"
                   " -DKILN_GPU=1 -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP -I'" +
                   (cccl.empty() ? std::string("/usr/local/cuda/include/cccl") : cccl) + "' -I'" + include_dir_locked() +
                   "'" + (flags.empty() ? "" : " " + flags);
#endif
        }
        return cxx + jit_target_flags() + " -O2 -DNDEBUG -ffp-contract=off -DKILN_FP_CONTRACT=0 -fPIC -shared -I'" +
               include_dir_locked() + "'" + (flags.empty() ? "" : " " + flags);
    }

    // Sizes and times of kiln's headers that kernels compile, so that a cached kernel built against other headers
    // is not loaded.
    std::string stamp_locked() {
#if KILN_JIT_SUPPORTED
        if (!stamp_.empty()) return stamp_;
        std::string s = "kiln-jit-1";
        const std::string inc = include_dir_locked() + "/kiln";
        for (const char* sub : {"ops", "expr", "core", "backend", "backend/cpu", "backend/thrust", "function"}) {
            const std::string dir = inc + "/" + sub;
            if (DIR* d = ::opendir(dir.c_str())) {
                std::vector<std::string> names;
                while (dirent* ent = ::readdir(d)) names.emplace_back(ent->d_name);
                ::closedir(d);
                std::sort(names.begin(), names.end());
                for (const std::string& n : names) {
                    struct stat st {};
                    if (::stat((dir + "/" + n).c_str(), &st) == 0 && S_ISREG(st.st_mode))
                        s += "|" + n + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtime);
                }
            }
        }
        for (const std::string& h : opts_.includes) s += "|" + h;
        stamp_ = s;
        return stamp_;
#else
        return {};
#endif
    }

    void work() {
        std::unique_lock lock(mu_);
        for (;;) {
            wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (stop_) return;
            job j = std::move(queue_.front());
            queue_.pop_front();
            lock.unlock();
            build(j);
            lock.lock();
        }
    }

#if KILN_JIT_SUPPORTED
    static bool make_dirs(const std::string& dir) {
        for (std::size_t at = 1; at <= dir.size(); ++at) {
            if (at != dir.size() && dir[at] != '/') continue;
            const std::string part = dir.substr(0, at);
            if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;
        }
        struct stat st {};
        return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }

    static std::string read_head(const std::string& path, std::size_t most) {
        std::string s;
        if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
            s.resize(most);
            s.resize(std::fread(s.data(), 1, most, f));
            std::fclose(f);
        }
        return s;
    }

    // Loads (compiling first if the disk cache lacks it) and hands the kernel to the slots waiting for it.
    void build(const job& j) {
        void* fn = nullptr;
        std::string error;
        bool compiled = false;
        double seconds = 0;
        const std::string so = j.dir + "/" + j.key + ".so";
        if (!make_dirs(j.dir)) {
            error = "cannot create the kernel cache directory " + j.dir;
        } else {
            struct stat st {};
            if (::stat(so.c_str(), &st) != 0) {
                const std::string src = j.dir + "/" + j.key + ".cpp", log = j.dir + "/" + j.key + ".log";
                const std::string tmp = so + ".tmp" + std::to_string(::getpid()) + "_" +
                                        std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
                if (std::FILE* f = std::fopen(src.c_str(), "wb")) {
                    std::fwrite(j.source.data(), 1, j.source.size(), f);
                    std::fclose(f);
                    const auto t0 = std::chrono::steady_clock::now();
                    const std::string cmd = j.command + " -o '" + tmp + "' '" + src + "' > '" + log + "' 2>&1";
                    const int rc = std::system(cmd.c_str());
                    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                    if (rc != 0) {
                        std::string head = read_head(log, 1500);
                        error = "compiling a fused group failed (" + cmd + "): " + (head.empty() ? "no output" : head);
                        ::unlink(tmp.c_str());
                    } else if (::rename(tmp.c_str(), so.c_str()) != 0) {
                        error = "cannot move the compiled kernel to " + so;
                        ::unlink(tmp.c_str());
                    } else {
                        compiled = true;
                    }
                } else {
                    error = "cannot write " + src;
                }
            }
            if (error.empty()) {
                void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
                if (!h) {
                    const char* why = ::dlerror();
                    error = "cannot load " + so + ": " + (why ? why : "unknown error");
                } else {
                    const char* symbol = j.device ? "kiln_fused_group_device" : "kiln_fused_group";
                    fn = ::dlsym(h, symbol);
                    if (!fn) error = std::string("no ") + symbol + " in " + so;
                }
            }
        }
        std::lock_guard lock(mu_);
        entry& e = kernels_[j.key];
        e.fn = fn;
        e.error = error;
        e.done = true;
        if (fn) {
            (compiled ? stats_.compiled : stats_.from_disk) += 1;
            for (const auto& w : e.waiting)
                if (auto s = w.lock()) hand_over(*s, fn, j.device);
        } else {
            stats_.failed += e.waiting.size();
            stats_.last_error = error;
        }
        stats_.compile_seconds += seconds;
        e.waiting.clear();
        --pending_;
        idle_.notify_all();
    }
#else
    void build(const job&) {}
#endif

    std::mutex mu_;
    std::condition_variable wake_, idle_;
    std::deque<job> queue_;
    std::thread worker_;
    bool stop_ = false;
    std::size_t pending_ = 0;
    jit_options opts_;
    jit_statistics stats_;
    std::string stamp_;
    std::unordered_map<std::string, entry> kernels_;
};
using jit_service = basic_jit_service<>;

}  // namespace detail
}  // namespace kiln
