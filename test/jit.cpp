// Function mode's kernel compiler (kiln/function/jit.hpp): a fused group compiled into one loop gives the bits of
// the same group interpreted tile by tile, for float32 and float64, over tails, repeating operands and several
// exported values; identical groups share a kernel, a second process loads it from the disk cache, a compiler that
// fails leaves the groups interpreted with the reason, and a background compile swaps the kernel in between calls.
#include <kiln/function.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "check.hpp"
#include "jit_user_op.hpp"
#include "tensor_check.hpp"

using kiln_test::values;

namespace {

// A cache directory of this process's own, so that what the tests count is compiled here; removed when the test
// case ends (a kernel the compiler refused has its log quoted in jit_stats().last_error, which the checks print).
struct fresh_cache {
    std::string dir;
    explicit fresh_cache(const char* what) {
        const char* base = std::getenv("KILN_JIT_TEST_DIR");
        dir = std::string(base ? base : "/tmp") + "/kiln-jit-test-" + std::to_string(::getpid()) + "-" + what;
        remove();
    }
    ~fresh_cache() { remove(); }
    void remove() const {
        const std::string cmd = "rm -rf '" + dir + "'";
        if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
    }
    operator const std::string&() const { return dir; }
};

void use_jit(kiln::jit_mode mode, const std::string& dir, std::string compiler = {}) {
    kiln::jit_options o;
    o.mode = mode;
    o.cache_dir = dir;
    o.compiler = std::move(compiler);
    kiln::set_jit(o);
}
void jit_off() { use_jit(kiln::jit_mode::off, {}); }

// Equal element for element, bit for bit (NaN payloads aside).
void check_bits(const kiln::tensor& a, const kiln::tensor& b) {
    REQUIRE(a.dtype() == b.dtype());
    REQUIRE(a.shape() == b.shape());
    const kiln::tensor ca = a.contiguous(), cb = b.contiguous();
    const std::size_t bytes = static_cast<std::size_t>(ca.numel()) * kiln::size_of(ca.dtype());
    const auto* pa = static_cast<const unsigned char*>(ca.raw_data());
    const auto* pb = static_cast<const unsigned char*>(cb.raw_data());
    std::size_t first = bytes;
    for (std::size_t i = 0; i < bytes && first == bytes; ++i)
        if (pa[i] != pb[i]) first = i;
    INFO("first differing byte: " << first << " of " << bytes);
    CHECK(first == bytes);
}

kiln::tensor chain(const kiln::tensor& x, const kiln::tensor& y) { return kiln::relu(x * y + 0.5 * x - y) * 2 + y; }

}  // namespace

TEST_CASE("a compiled fused group gives the interpreter's bits: float32 and float64, with a tail") {
    const fresh_cache dir("bits");
    for (kiln::dtype d : {kiln::float32, kiln::float64}) {
        const std::ptrdiff_t n = (1 << 16) + 5;  // past the threads' threshold, and not a multiple of any batch
        kiln::generator gen(7);
        const kiln::tensor x = kiln::randn({n}, kiln::float32, gen).to(d), y = kiln::randn({n}, kiln::float32, gen).to(d);
        jit_off();
        auto interpreted = kiln::function(chain);
        const kiln::tensor want = interpreted(x, y);
        CHECK(interpreted.compiled_groups(x, y) == std::pair<std::size_t, std::size_t>{1, 0});
        use_jit(kiln::jit_mode::blocking, dir);
        auto compiled = kiln::function(chain);
        const kiln::tensor got = compiled(x, y);
        INFO("dtype " << kiln::name(d) << "; " << kiln::jit_stats().last_error);
        CHECK(compiled.compiled_groups(x, y) == std::pair<std::size_t, std::size_t>{1, 1});
        CHECK(compiled.compiled(x, y)->groups[0].jit->runs.load() == 1);  // the kernel ran, not the interpreter
        check_bits(got, want);
        kiln_test::check_all_close(values(got), values(chain(x, y)), 1e-6);
        // Small and odd sizes run the same kernel (one range below the threads' threshold).
        for (std::ptrdiff_t m : {1, 7, 33, 1029}) {
            const kiln::tensor a = kiln::randn({m}, kiln::float32, gen).to(d), b = kiln::randn({m}, kiln::float32, gen).to(d);
            jit_off();
            auto ref = kiln::function(chain);
            use_jit(kiln::jit_mode::blocking, dir);
            check_bits(compiled(a, b), ref(a, b));
        }
    }
    jit_off();
}

TEST_CASE("compiled groups with functions of the vocabulary, repeating operands and several exported values") {
    const fresh_cache dir("mixed");
    kiln::generator gen(11);
    const kiln::tensor x = kiln::randn({300, 10}, kiln::float32, gen), y = kiln::randn({300, 10}, kiln::float32, gen);
    const kiln::tensor w = kiln::randn({10}, kiln::float32, gen), b = kiln::randn({1, 10}, kiln::float32, gen);
    auto body = [](const kiln::tensor& x, const kiln::tensor& y, const kiln::tensor& w, const kiln::tensor& b) {
        // One group: x * w + b repeats w and b along the rows; t is used after the group (by sum), so the group
        // exports it as well as its last value.
        kiln::tensor t = kiln::tanh(x * w + b) * kiln::exp(-kiln::abs(y)) + kiln::sigmoid(x * y);
        kiln::tensor u = kiln::sqrt(kiln::square(t) + 1.5) - kiln::maximum(t, y) / 3.0;
        return std::tuple{u, kiln::sum(t)};
    };
    jit_off();
    auto interpreted = kiln::function(body);
    const auto [u0, s0] = interpreted(x, y, w, b);
    use_jit(kiln::jit_mode::blocking, dir);
    auto compiled = kiln::function(body);
    const auto [u1, s1] = compiled(x, y, w, b);
    INFO(kiln::jit_stats().last_error);
    const auto [groups, ready] = compiled.compiled_groups(x, y, w, b);
    CHECK(groups >= 1);
    CHECK(ready == groups);
    check_bits(u1, u0);
    check_bits(s1, s0);
    // And both agree with eager mode.
    const auto [ue, se] = body(x, y, w, b);
    kiln_test::check_all_close(values(u1), values(ue), 1e-5, 1e-6);
    kiln_test::check_all_close(values(s1), values(se), 1e-5, 1e-4);
    jit_off();
}

TEST_CASE("identical groups share one kernel, and a second process loads it from the disk cache") {
    const fresh_cache dir("share");
    use_jit(kiln::jit_mode::blocking, dir);
    const kiln::tensor x = kiln::full({100}, 3.0f), y = kiln::full({100}, 2.0f);
    auto body = [](const kiln::tensor& a, const kiln::tensor& b) { return (a - b) * (a + b) * 0.25f; };
    const kiln::jit_statistics before = kiln::jit_stats();
    auto f = kiln::function(body);
    CHECK(values(f(x, y))[0] == 1.25);
    auto g = kiln::function(body);  // another function, the same group
    CHECK(values(g(x, y))[99] == 1.25);
    const kiln::jit_statistics after = kiln::jit_stats();
    CHECK(after.compiled == before.compiled + 1);
    CHECK(after.reused == before.reused + 1);
    jit_off();
    // This test program again, in a new process, asked for the same kernel from the same cache directory.
    char exe[4096];
    const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    REQUIRE(len > 0);
    exe[len] = '\0';
    const std::string log = dir.dir + "/child.log";
    const std::string cmd = "KILN_JIT_TEST_CHILD_CACHE='" + dir.dir + "' '" + std::string(exe) +
                            "' --no-skip --test-case='*child process*' > '" + log + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::string out;
    if (std::FILE* f = std::fopen(log.c_str(), "r")) {
        char buf[4096];
        out.assign(buf, std::fread(buf, 1, sizeof buf, f));
        std::fclose(f);
    }
    INFO("the child process said: " << out);
    CHECK(rc == 0);
}

TEST_CASE("the child process of the disk cache test: its kernel comes from disk" * doctest::skip()) {
    const char* dir = std::getenv("KILN_JIT_TEST_CHILD_CACHE");
    REQUIRE(dir);
    use_jit(kiln::jit_mode::blocking, dir);
    const kiln::tensor x = kiln::full({100}, 3.0f), y = kiln::full({100}, 2.0f);
    auto f = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) { return (a - b) * (a + b) * 0.25f; });
    CHECK(values(f(x, y))[0] == 1.25);
    const kiln::jit_statistics s = kiln::jit_stats();
    CHECK(s.from_disk == 1);
    CHECK(s.compiled == 0);
    CHECK(f.compiled_groups(x, y) == std::pair<std::size_t, std::size_t>{1, 1});
}

TEST_CASE("a compiler that fails leaves the groups interpreted, with the reason") {
    const fresh_cache dir("fail");
    use_jit(kiln::jit_mode::blocking, dir, "/nonexistent/kiln-test-c++");
    const kiln::jit_statistics before = kiln::jit_stats();
    kiln::generator gen(3);
    const kiln::tensor x = kiln::randn({2000}, kiln::float32, gen), y = kiln::randn({2000}, kiln::float32, gen);
    auto f = kiln::function(chain);
    const kiln::tensor got = f(x, y);
    const kiln::jit_statistics after = kiln::jit_stats();
    CHECK(after.failed == before.failed + 1);
    CHECK(after.last_error.find("/nonexistent/kiln-test-c++") != std::string::npos);
    CHECK(f.compiled_groups(x, y) == std::pair<std::size_t, std::size_t>{1, 0});
    jit_off();
    auto ref = kiln::function(chain);
    check_bits(got, ref(x, y));
}

TEST_CASE("in the background, calls run interpreted until the kernel is ready, from several threads, with the same bits") {
    const fresh_cache dir("background");
    kiln::generator gen(5);
    const kiln::tensor x = kiln::randn({5000}, kiln::float32, gen), y = kiln::randn({5000}, kiln::float32, gen);
    auto body = [](const kiln::tensor& a, const kiln::tensor& b) { return kiln::minimum(a * 1.25, b) - kiln::neg(b) / 7.0; };
    jit_off();
    auto ref = kiln::function(body);
    const kiln::tensor want = ref(x, y);
    use_jit(kiln::jit_mode::background, dir);
    auto f = kiln::function(body);
    std::vector<std::thread> threads;
    std::vector<kiln::tensor> got(4);
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 20; ++i) got[static_cast<std::size_t>(t)] = f(x, y);
        });
    for (auto& th : threads) th.join();
    for (const kiln::tensor& g : got) check_bits(g, want);
    kiln::jit_wait();
    INFO(kiln::jit_stats().last_error);
    CHECK(f.compiled_groups(x, y) == std::pair<std::size_t, std::size_t>{1, 1});
    check_bits(f(x, y), want);
    CHECK(kiln::jit_stats().pending == 0);
    jit_off();
}

TEST_CASE("an op of the program's own compiles once its header is named in jit_options::includes") {
    const fresh_cache dir("user");
    kiln::generator gen(9);
    const kiln::tensor x = kiln::randn({3000}, kiln::float32, gen);
    auto body = [](const kiln::tensor& a) { return kiln::detail::make<jit_user::cube_plus_one>(a * 0.5f) - a; };
    jit_off();
    auto ref = kiln::function(body);
    const kiln::tensor want = ref(x);
    // Without its header the kernel's source cannot name the op: the compiler says so, the group is interpreted.
    use_jit(kiln::jit_mode::blocking, dir);
    const kiln::jit_statistics before = kiln::jit_stats();
    auto f = kiln::function(body);
    check_bits(f(x), want);
    CHECK(kiln::jit_stats().failed == before.failed + 1);
    CHECK(kiln::jit_stats().last_error.find("jit_user") != std::string::npos);
    CHECK(f.compiled_groups(x) == std::pair<std::size_t, std::size_t>{1, 0});
    // With it, the group compiles.
    kiln::jit_options o = kiln::jit_settings();
    std::string here = __FILE__;
    o.includes = {here.substr(0, here.find_last_of('/') + 1) + "jit_user_op.hpp"};
    kiln::set_jit(o);
    auto g = kiln::function(body);
    check_bits(g(x), want);
    INFO(kiln::jit_stats().last_error);
    CHECK(g.compiled_groups(x) == std::pair<std::size_t, std::size_t>{1, 1});
    jit_off();
}

TEST_CASE("function_options::jit overrides the process's setting for one function") {
    const fresh_cache dir("option");
    kiln::generator gen(13);
    const kiln::tensor x = kiln::randn({4000}, kiln::float32, gen), y = kiln::randn({4000}, kiln::float32, gen);
    auto body = [](const kiln::tensor& a, const kiln::tensor& b) { return kiln::abs(a - b) * 0.75f + a * b; };
    // The process's compiler is off (only its cache directory is set); this function compiles.
    use_jit(kiln::jit_mode::off, dir);
    auto on = kiln::function(body, kiln::function_options{.jit = kiln::jit_mode::blocking});
    auto ref = kiln::function(body);
    check_bits(on(x, y), ref(x, y));
    CHECK(on.compiled_groups(x, y) == std::pair<std::size_t, std::size_t>{1, 1});
    CHECK(ref.compiled_groups(x, y) == std::pair<std::size_t, std::size_t>{1, 0});
    // The process's compiler is on; this function stays interpreted.
    use_jit(kiln::jit_mode::blocking, dir);
    auto off = kiln::function(body, kiln::function_options{.jit = kiln::jit_mode::off});
    check_bits(off(x, y), ref(x, y));
    CHECK(off.compiled_groups(x, y) == std::pair<std::size_t, std::size_t>{1, 0});
    jit_off();
}
