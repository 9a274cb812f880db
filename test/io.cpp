// Files (issue #16): safetensors written and read back for every dtype, the exact bytes of a small file worked out
// from the format's description, every malformed header refused with a message naming what is wrong, and
// checkpoints that resume training bit for bit.
#include <kiln/io.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "check.hpp"
#include "random_programs.hpp"
#include "tensor_check.hpp"

using kiln_test::f64;
using kiln_test::values;

namespace {

std::string temp_path(const std::string& name) { return "kiln_io_test_" + name; }

// A file of a header and data, the header's length prefixed as the format says.
std::string file_of(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i, n >>= 8) out[static_cast<std::size_t>(i)] = static_cast<char>(n & 0xff);
    return out + header + data;
}

std::string floats(std::initializer_list<float> v) {
    std::string s(v.size() * 4, '\0');
    std::memcpy(s.data(), std::data(v), s.size());
    return s;
}

// The message of the kiln::file_error that loading `bytes` gives ("" when it loads).
std::string refusal(const std::string& bytes) {
    try {
        (void)kiln::load_safetensors_bytes(bytes.data(), bytes.size(), "bad.safetensors");
    } catch (const kiln::file_error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("safetensors: the bytes of a small file are the format's, header padded to 8 bytes") {
    const std::string bytes = kiln::safetensors_bytes({{"a", kiln::from_values<float>({1.5f, -2.0f}, {2})}});
    const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";  // 54 bytes
    REQUIRE(header.size() == 54);
    const std::string expect = file_of(header + "  ", floats({1.5f, -2.0f}));  // padded to 56
    CHECK(bytes == expect);
    // Metadata comes first, as an object of strings.
    const std::string with_meta = kiln::safetensors_bytes({{"a", kiln::from_values<float>({1.5f, -2.0f}, {2})}}, {{"format", "np"}});
    const std::string head = R"({"__metadata__":{"format":"np"},)";
    CHECK(with_meta.substr(8, head.size()) == head);
}

TEST_CASE("safetensors: every dtype, views, empty and rank-0 tensors, metadata and UTF-8 names round-trip") {
    const kiln::tensor m = f64({1, 2, 3, 4, 5, 6}, {2, 3});
    std::map<std::string, kiln::tensor> in{
        {"f64", m},
        {"f32 transposed", m.to(kiln::float32).transpose(0, 1)},  // a view: written as its elements
        {"i32", kiln::from_values<std::int32_t>({-7, 0, 2147483647}, {3})},
        {"i64", kiln::from_values<std::int64_t>({-9000000000LL, 5}, {2, 1})},
        {"bool", kiln::from_values<bool>({true, false, true}, {3})},
        {"empty", kiln::zeros({0, 4}, kiln::float32)},
        {"scalar", kiln::tensor(2.5)},
        {"couche/poids \xc3\xa9\xe2\x82\xac", kiln::ones({1}, kiln::float64)},
    };
    const std::string path = temp_path("round.safetensors");
    kiln::save_safetensors(path, in, {{"epoch", "3"}, {"note", "line\n\"quoted\""}});
    const kiln::tensor_file f = kiln::load_safetensors(path);
    std::remove(path.c_str());
    CHECK(f.size() == in.size());
    CHECK(f.metadata.at("epoch") == "3");
    CHECK(f.metadata.at("note") == "line\n\"quoted\"");
    CHECK(f.at("f64").dtype() == kiln::float64);
    CHECK(values(f.at("f64")) == std::vector<double>{1, 2, 3, 4, 5, 6});
    CHECK(f.at("f32 transposed").dtype() == kiln::float32);
    CHECK(f.at("f32 transposed").shape() == kiln::dims{3, 2});
    CHECK(values(f.at("f32 transposed")) == std::vector<double>{1, 4, 2, 5, 3, 6});
    CHECK(f.at("i32").dtype() == kiln::int32);
    CHECK(f.at("i32").data<std::int32_t>()[2] == 2147483647);
    CHECK(f.at("i64").shape() == kiln::dims{2, 1});
    CHECK(f.at("i64").data<std::int64_t>()[0] == -9000000000LL);
    CHECK(f.at("bool").dtype() == kiln::bool_);
    CHECK(values(f.at("bool")) == std::vector<double>{1, 0, 1});
    CHECK(f.at("empty").shape() == kiln::dims{0, 4});
    CHECK(f.at("scalar").dim() == 0);
    CHECK(values(f.at("scalar")) == std::vector<double>{2.5});
    CHECK(values(f.at("couche/poids \xc3\xa9\xe2\x82\xac")) == std::vector<double>{1});
    // A name that is not there names the closest ones.
    std::string miss;
    try {
        (void)f.at("f46");
    } catch (const kiln::value_error& e) {
        miss = e.what();
    }
    CHECK(miss.find("no tensor named 'f46'") != std::string::npos);
    CHECK(miss.find("'f64'") != std::string::npos);
}

TEST_CASE("safetensors: what cannot be written is refused before the file is touched") {
    const std::string path = temp_path("refused.safetensors");
    CHECK_THROWS_WITH_AS(kiln::save_safetensors(path, {{"__metadata__", kiln::ones({1})}}),
                         doctest::Contains("'__metadata__' is reserved"), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::save_safetensors(path, {{"bad \xff name", kiln::ones({1})}}),
                         doctest::Contains("is not valid UTF-8"), kiln::value_error);
    std::ifstream probe(path);
    CHECK(!probe.good());
    CHECK_THROWS_WITH_AS(kiln::save_safetensors("/nonexistent-dir/x.safetensors", {{"a", kiln::ones({1})}}),
                         doctest::Contains("cannot open"), kiln::file_error);
    CHECK_THROWS_WITH_AS(kiln::load_safetensors("/nonexistent-dir/x.safetensors"), doctest::Contains("cannot open"),
                         kiln::file_error);
}

TEST_CASE("safetensors: the dtypes kiln lacks are read widened, exactly (I8 to U64, F16, BF16)") {
    auto bytes = [](std::initializer_list<int> b) {
        std::string s;
        for (int x : b) s += static_cast<char>(x);
        return s;
    };
    const std::string header =
        R"({"bf":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},)"
        R"("h":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]},)"
        R"("i8":{"dtype":"I8","shape":[3],"data_offsets":[16,19]},)"
        R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[19,21]},)"
        R"("i16":{"dtype":"I16","shape":[1],"data_offsets":[21,23]},)"
        R"("u16":{"dtype":"U16","shape":[1],"data_offsets":[23,25]},)"
        R"("u32":{"dtype":"U32","shape":[1],"data_offsets":[25,29]},)"
        R"("u64":{"dtype":"U64","shape":[1],"data_offsets":[29,37]}})";
    // bfloat16 1.0, -3.0, the largest finite (0x7f7f) and a NaN; float16 [[1, -0], [2^-24, inf]];
    // int8 -128, -1, 127; uint8 0, 255; int16 -300; uint16 65535; uint32 4294967295; uint64 2^62.
    const std::string data = bytes({0x80, 0x3f, 0x40, 0xc0, 0x7f, 0x7f, 0xc0, 0x7f}) +
                             bytes({0x00, 0x3c, 0x00, 0x80, 0x01, 0x00, 0x00, 0x7c}) + bytes({0x80, 0xff, 0x7f}) +
                             bytes({0x00, 0xff}) + bytes({0xd4, 0xfe}) + bytes({0xff, 0xff}) + bytes({0xff, 0xff, 0xff, 0xff}) +
                             bytes({0, 0, 0, 0, 0, 0, 0, 0x40});
    const std::string file = file_of(header, data);
    REQUIRE(refusal(file).empty());
    const kiln::tensor_file f = kiln::load_safetensors_bytes(file.data(), file.size());
    const kiln::tensor& bf = f.at("bf");
    CHECK(bf.dtype() == kiln::float32);
    CHECK(bf.data<float>()[0] == 1.0f);
    CHECK(bf.data<float>()[1] == -3.0f);
    CHECK(bf.data<float>()[2] == std::ldexp(255.0f / 128.0f, 127));
    CHECK(std::isnan(bf.data<float>()[3]));
    const kiln::tensor& h = f.at("h");
    CHECK(h.dtype() == kiln::float32);
    CHECK(h.shape() == kiln::dims{2, 2});
    CHECK(h.data<float>()[0] == 1.0f);
    CHECK((h.data<float>()[1] == 0.0f && std::signbit(h.data<float>()[1])));
    CHECK(h.data<float>()[2] == std::ldexp(1.0f, -24));
    CHECK(h.data<float>()[3] == std::numeric_limits<float>::infinity());
    CHECK(f.at("i8").dtype() == kiln::int32);
    CHECK(values(f.at("i8")) == std::vector<double>{-128, -1, 127});
    CHECK(values(f.at("u8")) == std::vector<double>{0, 255});
    CHECK(f.at("i16").item<std::int32_t>() == -300);
    CHECK(f.at("u16").item<std::int32_t>() == 65535);
    CHECK(f.at("u32").dtype() == kiln::int64);
    CHECK(f.at("u32").item<std::int64_t>() == 4294967295LL);
    CHECK(f.at("u64").item<std::int64_t>() == (std::int64_t{1} << 62));
}

TEST_CASE("safetensors: a malformed file is refused, naming the file and what is wrong") {
    const std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    const std::string data = floats({1, 2});
    REQUIRE(refusal(file_of(good_header, data)).empty());

    CHECK(refusal("").find("'bad.safetensors': truncated: 0 bytes") != std::string::npos);
    CHECK(refusal(std::string("\x10\0\0\0\0\0\0\0{}", 10)).find("the header needs 16 bytes and 2 follow") != std::string::npos);
    CHECK(refusal(std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8)).find("declares a header of 18446744073709551615 bytes") !=
          std::string::npos);
    CHECK(refusal(file_of("[1]", "")).find("does not begin with '{'") != std::string::npos);
    CHECK(refusal(file_of("{\"a\":", "")).find("ends where a value was expected") != std::string::npos);
    CHECK(refusal(file_of("{\"a\":1} x", "")).find("unexpected text after the JSON value") != std::string::npos);
    CHECK(refusal(file_of("{\"a\":" + std::string(200, '['), "")).find("nested more than 64 deep") != std::string::npos);
    CHECK(refusal(file_of("{\"\xc3\x28\":1}", "")).find("not valid UTF-8") != std::string::npos);
    // The same name twice: two readers could see different tensors.
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          data))
              .find("the key \"a\" appears twice") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", data))
              .find("tensor 'a' (header byte 13) is F8_E4M3, a dtype kiln does not read") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", data))
              .find("shape (3,) of F16 needs 6 bytes, but data_offsets [0, 8] hold 8") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"U64","shape":[1],"data_offsets":[0,8]}})", std::string("\0\0\0\0\0\0\0\x80", 8)))
              .find("tensor 'a': the U64 at element 0 (9223372036854775808) is beyond int64") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", data)).find("unknown dtype 'Q4'") !=
          std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data))
              .find("shape[0] is not a non-negative integer") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", data))
              .find("unknown field 'x'") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2]}})", data)).find("lacks 'data_offsets'") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data))
              .find("shape (3,) of F32 needs 12 bytes, but data_offsets [0, 8] hold 8") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", data))
              .find("reach past the 8 bytes of data") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data)).find("end before they begin") !=
          std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", data))
              .find("more elements than can be addressed") != std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data)).find("a gap precedes it") !=
          std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data))
              .find("it overlaps another tensor") != std::string::npos);
    CHECK(refusal(file_of(good_header, data + "xyz")).find("3 bytes of data at data byte 8 belong to no tensor") !=
          std::string::npos);
    CHECK(refusal(file_of(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2)))
              .find("the bool at element 1 is neither 0 nor 1") != std::string::npos);
    CHECK(refusal(file_of(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data))
              .find("metadata values are strings") != std::string::npos);
    // Escapes are decoded (a name may hold any character) and surrogates are paired.
    const std::string esc = file_of(R"({"\u00e9\ud83d\ude00\n":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data);
    const kiln::tensor_file f = kiln::load_safetensors_bytes(esc.data(), esc.size());
    CHECK(f.contains("\xc3\xa9\xf0\x9f\x98\x80\n"));
    CHECK(refusal(file_of(R"({"\ud83d":1})", "")).find("high surrogate without its pair") != std::string::npos);
}

namespace {

std::string file_error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const kiln::file_error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("checkpoints: parameters and Adam's slots and step count round-trip into the same storage") {
    kiln::variable w(f64({1, 2, 3}, {3})), b(f64({0.5}, {1}));
    kiln::optim::adam opt({&w, &b}, 0.1);
    for (int i = 0; i < 3; ++i) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::sum(kiln::square(w * 2.0 + b));
        opt.step(tape.gradient(loss, {w, b}));
    }
    const std::string path = temp_path("adam.ckpt");
    kiln::save_checkpoint(path, {&w, &b}, opt);
    // The file is plain safetensors: other tools read the weights by name.
    const kiln::tensor_file f = kiln::load_safetensors(path);
    CHECK(f.metadata.at("kiln.checkpoint") == "1");
    CHECK(f.metadata.at("optimizer") == "adam");
    CHECK(f.metadata.at("optimizer.hyperparameters").find("lr=0.1") != std::string::npos);
    CHECK(f.names() == std::vector<std::string>{"optimizer/m/0", "optimizer/m/1", "optimizer/step", "optimizer/v/0",
                                                "optimizer/v/1", "param/0", "param/1"});
    CHECK(f.at("optimizer/step").data<std::int64_t>()[0] == 3);
    CHECK(values(f.at("param/0")) == values(w));

    // Into a second model and optimizer: the values land in the variables' own storage.
    kiln::variable w2(f64({0, 0, 0}, {3})), b2(f64({0}, {1}));
    const void* storage = w2.raw_data();
    kiln::optim::adam opt2(0.1);  // no parameters yet: load_checkpoint binds them
    kiln::load_checkpoint(path, {&w2, &b2}, opt2);
    CHECK(w2.raw_data() == storage);
    CHECK(values(w2) == values(w));
    CHECK(opt2.steps() == 3);
    const auto s1 = opt.state(), s2 = opt2.state();
    CHECK(values(s2.at("m/0")) == values(s1.at("m/0")));
    CHECK(values(s2.at("v/1")) == values(s1.at("v/1")));
    // The next step of each is the same, bit for bit.
    for (auto* o : {&opt, &opt2}) {
        kiln::variable& wv = o == &opt ? w : w2;
        kiln::variable& bv = o == &opt ? b : b2;
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::sum(kiln::square(wv * 2.0 + bv));
        o->step(tape.gradient(loss, {wv, bv}));
    }
    CHECK(values(w2) == values(w));
    CHECK(values(b2) == values(b));
    std::remove(path.c_str());
}

TEST_CASE("checkpoints: AdamW round-trips as its own kind, and resumes bit for bit") {
    kiln::variable w(f64({1, -2, 3}, {3}));
    kiln::optim::adamw opt({&w}, 0.05, 0.9, 0.999, 1e-8, 0.3);
    auto step = [](kiln::optim::adamw& o, kiln::variable& v) {
        kiln::gradient_tape tape;
        o.step(tape.gradient(kiln::sum(kiln::square(v - 0.5)), {v}));
    };
    for (int i = 0; i < 2; ++i) step(opt, w);
    const std::string path = temp_path("adamw.ckpt");
    kiln::save_checkpoint(path, {&w}, opt);
    const kiln::tensor_file f = kiln::load_safetensors(path);
    CHECK(f.metadata.at("optimizer") == "adamw");
    CHECK(f.metadata.at("optimizer.hyperparameters").find("weight_decay=") != std::string::npos);
    kiln::variable w2(f64({0, 0, 0}, {3}));
    kiln::optim::adamw opt2(0.05, 0.9, 0.999, 1e-8, 0.3);
    kiln::load_checkpoint(path, {&w2}, opt2);
    for (int i = 0; i < 2; ++i) step(opt, w), step(opt2, w2);
    CHECK(values(w2) == values(w));
    // Adam's checkpoint is not AdamW's, nor the other way round.
    kiln::variable w3(f64({0, 0, 0}, {3}));
    kiln::optim::adam plain(0.05);
    CHECK_THROWS_AS(kiln::load_checkpoint(path, {&w3}, plain), kiln::file_error);
    std::remove(path.c_str());
}

TEST_CASE("checkpoints: a file that does not fit the model is refused before anything changes") {
    kiln::variable w(f64({1, 2, 3}, {3}));
    kiln::optim::adam opt({&w});
    const std::string path = temp_path("fit.ckpt");
    kiln::save_checkpoint(path, {&w}, opt);

    kiln::variable other_shape(f64({0, 0}, {2}));
    kiln::optim::adam opt2({&other_shape});
    CHECK(file_error_of([&] { kiln::load_checkpoint(path, {&other_shape}, opt2); })
              .find("tensor 'param/0' is (3,) float64, but the model's is (2,) float64") != std::string::npos);
    CHECK(values(other_shape) == std::vector<double>{0, 0});

    kiln::variable w3(f64({0, 0, 0}, {3}));
    kiln::optim::sgd sgd({&w3}, 0.1);
    CHECK(file_error_of([&] { kiln::load_checkpoint(path, {&w3}, sgd); })
              .find("holds the state of optimizer 'adam', but it is loaded into 'sgd'") != std::string::npos);
    // Without the optimizer its slots are extra tensors; with two parameters one is missing.
    CHECK(file_error_of([&] { kiln::load_checkpoint(path, {&w3}); }).find("holds the state of optimizer 'adam'") !=
          std::string::npos);
    kiln::variable extra(f64({0}, {1}));
    kiln::optim::adam opt3({&w3, &extra});
    CHECK(file_error_of([&] { kiln::load_checkpoint(path, {&w3, &extra}, opt3); }).find("has no tensor 'param/1'") !=
          std::string::npos);
    CHECK(values(w3) == std::vector<double>{0, 0, 0});
    // A plain safetensors file is not a checkpoint.
    kiln::save_safetensors(path, {{"param/0", w}});
    CHECK(file_error_of([&] { kiln::load_checkpoint(path, {&w3}); }).find("is not a kiln checkpoint") != std::string::npos);
    // A checkpoint with a tensor the model lacks.
    kiln::save_safetensors(path, {{"param/0", w}, {"param/9", w}}, {{"kiln.checkpoint", "1"}, {"optimizer", "none"}});
    CHECK(file_error_of([&] { kiln::load_checkpoint(path, {&w3}); }).find("holds tensor 'param/9', which the model") !=
          std::string::npos);
    kiln::save_safetensors(path, {{"param/0", w}}, {{"kiln.checkpoint", "7"}});
    CHECK(file_error_of([&] { kiln::load_checkpoint(path, {&w3}); }).find("a checkpoint of version '7'") != std::string::npos);
    std::remove(path.c_str());
}

TEST_CASE("checkpoints: a session's parameters by name, and a name the session does not know") {
    using namespace kiln::literals;
    constexpr kiln::input<"x", double, kiln::shape<kiln::dyn, 2>> x{};
    constexpr kiln::param<"w", double, kiln::shape<2, 1>> w{};
    constexpr auto loss = kiln::mean(kiln::square(kiln::matmul(x, w)));
    kiln::session s(3);
    s.initialize(loss);
    s.set("w", f64({1, 2}, {2, 1}));
    const std::string path = temp_path("session.ckpt");
    kiln::save_checkpoint(path, s);
    const kiln::tensor_file f = kiln::load_safetensors(path);
    CHECK(f.names() == std::vector<std::string>{"w"});
    CHECK(f.metadata.at("optimizer") == "none");

    kiln::session fresh(4);
    CHECK(file_error_of([&] { kiln::load_checkpoint(path, fresh); }).find("holds parameter 'w', which the session does not know") !=
          std::string::npos);
    fresh.declare(loss);
    kiln::load_checkpoint(path, fresh);
    CHECK(values(fresh.parameter("w")) == std::vector<double>{1, 2});
    std::remove(path.c_str());
}

// ---- traced functions as files (kiln::save, kiln::load) ----

namespace {

// A small model: (?, 3) -> (?, 2) with captured weights, numbers as operands and a reduction.
struct small_model {
    kiln::variable w{kiln::from_values<float>({1, -2, 0.5f, 3, -1, 2}, {3, 2})};
    kiln::tensor b = kiln::from_values<float>({0.25f, -0.5f}, {2});
    kiln::tensor operator()(const kiln::tensor& x) const {
        const kiln::tensor h = kiln::relu(kiln::matmul(x, w) + b) * 0.5;
        return h - kiln::sum(h, {1}, true) / 4;
    }
};

std::string bytes_of_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The saved small model's bytes.
std::string small_model_bytes() {
    static const std::string bytes = [] {
        small_model m;
        auto f = kiln::function([m](const kiln::tensor& x) { return m(x); }, {.name = "small"});
        const std::string path = temp_path("small.kfn");
        kiln::save(f, {kiln::spec(kiln::float32, {kiln::dyn, 3})}, path);
        std::string b = bytes_of_file(path);
        std::remove(path.c_str());
        return b;
    }();
    return bytes;
}

// The same file with its graph text edited (`from` must occur in it) and its length mended.
std::string with_graph(const std::string& bytes, const std::string& from, const std::string& to) {
    std::uint64_t g = 0;
    for (int i = 7; i >= 0; --i) g = (g << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(16 + i)]);
    std::string text = bytes.substr(24, static_cast<std::size_t>(g));
    const std::size_t at = text.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, from);
    text.replace(at, from.size(), to);
    std::string out = bytes.substr(0, 16);
    std::uint64_t n = text.size();
    for (int i = 0; i < 8; ++i, n >>= 8) out += static_cast<char>(n & 0xff);
    return out + text + bytes.substr(24 + static_cast<std::size_t>(g));
}

std::string load_refusal(const std::string& bytes) {
    try {
        (void)kiln::load_bytes(bytes.data(), bytes.size(), "bad.kfn");
    } catch (const kiln::file_error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("save and load: a traced function runs from its file with its dynamic batch and its captured weights") {
    const std::string bytes = small_model_bytes();
    CHECK(bytes.substr(0, 8) == "KILNFUNC");
    const kiln::loaded_function f = kiln::load_bytes(bytes.data(), bytes.size());
    CHECK(f.name() == "small");
    REQUIRE(f.signature().size() == 1);
    CHECK(kiln::to_string(f.signature()[0]) == "(?, 3) float32");
    CHECK(kiln::to_string(f.signature()) == "{(?, 3) float32}");
    CHECK(kiln::to_string(f.output_signature()) == "{(?, 2) float32}");
    CHECK(kiln::to_string(std::vector<kiln::spec>{kiln::spec(kiln::int64, {2}), kiln::spec(kiln::float64, {})}) == "{(2,) int64, () float64}");
    CHECK(f.outputs() == 1);
    // Values worked out by hand (w's rows [1, -2], [0.5, 3], [-1, 2]): x = [1, 1, 1] -> x.w + b = [0.75, 2.5]
    // -> relu * 0.5 = [0.375, 1.25] -> minus sum/4 (0.40625) = [-0.03125, 0.84375]; x = [0, 0, 0] -> b = [0.25, -0.5]
    // -> [0.125, 0] -> minus 0.03125.
    const kiln::tensor x = kiln::from_values<float>({1, 1, 1, 0, 0, 0}, {2, 3});
    const std::vector<kiln::tensor> y = f(x);
    REQUIRE(y.size() == 1);
    CHECK(values(y[0]) == std::vector<double>{-0.03125, 0.84375, 0.09375, -0.03125});
    // Another batch size replays the same graph.
    small_model m;
    const kiln::tensor x5 = kiln::randn({5, 3});
    CHECK(values(f(x5)[0]) == values(m(x5)));
    // The graph reads as the traced one does.
    const std::string text = kiln::to_string(f.graph());
    CHECK(text.find("matmul(%0, %1)") != std::string::npos);
    CHECK(text.find("operand1=0.5") != std::string::npos);
    // The graph is text a person can read, and the weights a safetensors file other tools can read.
    CHECK(bytes.find("\"op\":\"matmul\"") != std::string::npos);
    std::uint64_t g = 0;
    for (int i = 7; i >= 0; --i) g = (g << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(16 + i)]);
    const std::string weights = bytes.substr(24 + static_cast<std::size_t>(g));
    const kiln::tensor_file wf = kiln::load_safetensors_bytes(weights.data(), weights.size());
    CHECK(wf.size() == 2);
    CHECK(values(wf.at("node/1")) == std::vector<double>{1, -2, 0.5, 3, -1, 2});
    // Bad calls name the spec.
    CHECK_THROWS_WITH_AS(f(kiln::zeros({2, 4})), doctest::Contains("argument 0 has shape (2, 4), but its spec is (?, 3) float32"),
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(f(std::vector<kiln::tensor>{}), doctest::Contains("takes 1 argument, not 0"), kiln::value_error);
}

TEST_CASE("save: what cannot be saved is refused with the reason") {
    kiln::variable v(f64({1, 2}, {2}));
    auto writes = kiln::function([&](const kiln::tensor& x) {
        v.assign(v + x);
        return v * 2.0;
    });
    CHECK_THROWS_WITH_AS(kiln::save(writes, {kiln::spec(kiln::float64, {2})}, temp_path("w.kfn")),
                         doctest::Contains("the function writes into tensors"), kiln::value_error);
    auto one = kiln::function([](const kiln::tensor& x) { return x + 1; });
    CHECK_THROWS_WITH_AS(kiln::save(one, {kiln::spec(kiln::float32, {2}), kiln::spec(kiln::float32, {2})}, temp_path("w.kfn")),
                         doctest::Contains("cannot be called with 2 tensors"), kiln::value_error);
    // Dynamic dimensions that one trace cannot serve (n / 2 is not linear in n): function mode traces per extent;
    // a file cannot, so save refuses instead of writing a file that load would then reject.
    auto halves = kiln::function([](const kiln::tensor& x) { return x.slice(0, 0, x.shape()[0] / 2) * 2.0; });
    const std::string path = temp_path("halves.kfn");
    std::remove(path.c_str());
    CHECK_THROWS_WITH_AS(kiln::save(halves, {kiln::spec(kiln::float64, {kiln::dyn})}, path),
                         doctest::Contains("cannot be saved with dynamic dimensions"), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::export_onnx(halves, {kiln::spec(kiln::float64, {kiln::dyn})}, temp_path("halves.onnx")),
                         doctest::Contains("cannot be saved with dynamic dimensions"), kiln::value_error);
    CHECK(!std::ifstream(path).good());
    kiln::save(halves, {kiln::spec(kiln::float64, {6})}, path);  // static extents: one trace, one file
    CHECK(values(kiln::load(path)(f64({1, 2, 3, 4, 5, 6}, {6}))[0]) == std::vector<double>{2, 4, 6});
    // A function that holds only for some extents: the op's shape_error says which extents save traces with.
    auto rows_of_three = kiln::function([](const kiln::tensor& x) { return x + f64({1, 2, 3}, {3, 1}); });
    CHECK_THROWS_WITH_AS(kiln::save(rows_of_three, {kiln::spec(kiln::float64, {kiln::dyn, 2})}, path),
                         doctest::Contains("traces the function with each kiln::dyn extent at 2"), kiln::shape_error);
    std::remove(path.c_str());
}

TEST_CASE("save and export_onnx trace on inputs that take no memory: a (2^20, 2^20) signature saves in bytes") {
    // The traced function reads a corner of its input: the trace needs the input's dtype and shape only, so save and
    // export_onnx must not allocate it (4 TiB here; a device_error before).
    auto corner = kiln::function([](const kiln::tensor& x) { return x.slice(0, 0, 2).slice(1, 1, 4) * 2.0f; });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {1 << 20, 1 << 20})};
    const std::string path = temp_path("corner.kfn");
    kiln::save(corner, sig, path);
    CHECK_NOTHROW(kiln::export_onnx(corner, sig, temp_path("corner.onnx")));
    kiln::tensor x = kiln::full({}, 1.5, kiln::float32).broadcast_to({1 << 20, 1 << 20});
    // (kiln::load refuses a node declared over load_options::max_node_bytes, 2 GiB by default, the input's included.)
    CHECK_THROWS_WITH_AS(kiln::load(path), doctest::Contains("max_node_bytes"), kiln::file_error);
    kiln::load_options big;
    big.max_node_bytes = std::uint64_t{1} << 43;
    const kiln::tensor y = kiln::load(path, big)(x)[0];
    CHECK(y.shape() == kiln::dims{2, 3});
    CHECK(values(y.to(kiln::float64)) == std::vector<double>(6, 3.0));
    std::remove(path.c_str());
}

TEST_CASE("load and load_onnx check a product of two (16384, 16384) inputs without computing it") {
    // Both loaders run each op once on placeholders of its declared shapes; a product there gives zeros of stride 0
    // after its checks. Computed, this one (2^43 multiply-adds on operands BLAS does not take) took about an hour.
    auto product = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) { return kiln::matmul(a, b); });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {16384, 16384}), kiln::spec(kiln::float32, {16384, 16384})};
    const std::string path = temp_path("product.kfn"), onnx = temp_path("product.onnx");
    kiln::save(product, sig, path);
    kiln::export_onnx(product, sig, onnx);
    const kiln::loaded_function f = kiln::load(path);
    const std::vector<kiln::spec> out = f.output_signature();
    REQUIRE(out.size() == 1);
    CHECK(out[0].shape == std::vector<std::ptrdiff_t>{16384, 16384});
    const kiln::loaded_function g = kiln::load_onnx(onnx);
    REQUIRE(g.output_signature().size() == 1);
    CHECK(g.output_signature()[0].shape == std::vector<std::ptrdiff_t>{16384, 16384});
    // A product whose shapes do not multiply is still refused.
    CHECK_THROWS_WITH_AS(kiln::save(product, {kiln::spec(kiln::float32, {4, 3}), kiln::spec(kiln::float32, {4, 3})}, path),
                         doctest::Contains("cannot multiply (4, 3) by (4, 3)"), kiln::shape_error);
    std::remove(path.c_str());
    std::remove(onnx.c_str());
}

TEST_CASE("load and load_onnx check elementwise ops, casts and fills of a (2^20, 2^20) input without computing them; tracing and load reductions too") {
    // 4 TiB of float32, within a max_node_bytes of 2^50: in both loaders' check runs an elementwise op, a cast or a
    // fill of placeholders gives a placeholder (kiln::detail::shape_run); computed, the first op would ask for 4 TiB.
    auto f = kiln::function([](const kiln::tensor& x) {
        const kiln::tensor y = kiln::relu(x * 2.0 + 1.0) - kiln::ones(x.shape());
        return kiln::exp(y.to(kiln::float64));
    });
    const std::ptrdiff_t n = std::ptrdiff_t{1} << 20;
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {n, n})};
    const std::string path = temp_path("huge_chain.kfn"), onnx = temp_path("huge_chain.onnx");
    kiln::save(f, sig, path);
    kiln::export_onnx(f, sig, onnx);
    CHECK(bytes_of_file(path).size() < 100000);
    kiln::load_options opt;
    opt.max_node_bytes = std::uint64_t{1} << 50;
    const kiln::loaded_function a = kiln::load(path, opt), b = kiln::load_onnx(onnx, opt);
    for (const kiln::loaded_function* l : {&a, &b}) {
        const std::vector<kiln::spec> out = l->output_signature();
        REQUIRE(out.size() == 1);
        CHECK(out[0].dtype == kiln::float64);
        CHECK(out[0].shape == std::vector<std::ptrdiff_t>{n, n});
    }
    // Under the default limit (2 GiB) both refuse the input by its size.
    CHECK_THROWS_WITH_AS(kiln::load(path), doctest::Contains("max_node_bytes"), kiln::file_error);
    CHECK_THROWS_WITH_AS(kiln::load_onnx(onnx), doctest::Contains("max_node_bytes"), kiln::file_error);
    // Tracing and both loaders' checks take a reduction's and a flip's results from their shape rules (computed on
    // the placeholder, the sum alone would add 2^40 elements: load_onnx did not finish). load_onnx's check keeps
    // track of such values, since one may become a later op's shape (test/onnx_check.py has those models).
    auto reduced = kiln::function([](const kiln::tensor& x) {
        return std::make_tuple(kiln::sum(kiln::flip(x, {0}), {1}), kiln::max(x) * 2.0);
    });
    kiln::save(reduced, sig, path);
    kiln::export_onnx(reduced, sig, onnx);
    const kiln::loaded_function r = kiln::load(path, opt), ro = kiln::load_onnx(onnx, opt);
    for (const kiln::loaded_function* l : {&r, &ro}) {
        const std::vector<kiln::spec> rout = l->output_signature();
        REQUIRE(rout.size() == 2);
        CHECK(rout[0].shape == std::vector<std::ptrdiff_t>{n});
        CHECK(rout[0].dtype == kiln::float32);
        CHECK(rout[1].shape == std::vector<std::ptrdiff_t>{});
        CHECK(rout[1].dtype == kiln::float32);
    }
    // A reduction that eager mode refuses is still refused while tracing, with eager mode's message.
    CHECK_THROWS_WITH_AS(kiln::save(reduced, {kiln::spec(kiln::float32, {0, 4})}, path),
                         doctest::Contains("cannot reduce over an empty dimension"), kiln::value_error);
    std::remove(path.c_str());
    std::remove(onnx.c_str());
}

TEST_CASE("save, load and export_onnx: C++ bool numbers as operands, with eager mode's promotion") {
    // A bool number takes its tensors' dtype (x * true is x's float32; i + true adds 1 to int32), and where's
    // condition may be one.
    auto f = kiln::function([](const kiln::tensor& m, const kiln::tensor& x, const kiln::tensor& i) {
        return std::make_tuple(kiln::logical_and(m, true), kiln::where(m, m, false), x * true + x, i + true,
                               kiln::where(m, i, true), kiln::where(true, x, 0.5), kiln::equal(m, false));
    });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::bool_, {kiln::dyn}), kiln::spec(kiln::float32, {kiln::dyn}),
                                      kiln::spec(kiln::int32, {kiln::dyn})};
    const std::string path = temp_path("bools.kfn"), onnx = temp_path("bools.onnx");
    kiln::save(f, sig, path);
    kiln::export_onnx(f, sig, onnx);
    const std::string bytes = bytes_of_file(path);
    const kiln::loaded_function loaded = kiln::load(path), from_onnx = kiln::load_onnx(onnx);
    std::remove(path.c_str());
    std::remove(onnx.c_str());
    const kiln::tensor m = kiln::from_values({true, false, true, true}, kiln::dims{4});
    const kiln::tensor x = kiln::from_values({1.5, -2.0, 3.0, 0.25}, kiln::dims{4}).to(kiln::float32);
    const kiln::tensor i = kiln::from_values({4, 5, 6, -7}, kiln::dims{4}).to(kiln::int32);
    const std::vector<std::vector<double>> want = {{1, 0, 1, 1}, {1, 0, 1, 1}, {3, -4, 6, 0.5}, {5, 6, 7, -6},
                                                   {4, 1, 6, -7}, {1.5, -2, 3, 0.25}, {0, 1, 0, 0}};
    const kiln::dtype want_dtype[] = {kiln::bool_, kiln::bool_, kiln::float32, kiln::int32, kiln::int32, kiln::float32, kiln::bool_};
    for (const kiln::loaded_function* l : {&loaded, &from_onnx}) {
        const std::vector<kiln::tensor> got = (*l)({m, x, i});
        REQUIRE(got.size() == want.size());
        for (std::size_t k = 0; k < want.size(); ++k) {
            CHECK(values(got[k]) == want[k]);
            CHECK(got[k].dtype() == want_dtype[k]);
        }
    }
    // The file marks them, and a reader refuses a bool parameter that is neither 0 nor 1 or that is also floating.
    REQUIRE(bytes.find("\"bool_params\":1") != std::string::npos);
    CHECK(load_refusal(bytes).empty());
    CHECK(load_refusal(with_graph(bytes, "\"params\":[1],\"float_params\":0,\"opaque_params\":0,\"bool_params\":1",
                                  "\"params\":[2],\"float_params\":0,\"opaque_params\":0,\"bool_params\":1"))
              .find("bool parameter 0 is neither 0 nor 1") != std::string::npos);
    CHECK(load_refusal(with_graph(bytes, "\"float_params\":0,\"opaque_params\":0,\"bool_params\":1",
                                  "\"float_params\":1,\"opaque_params\":0,\"bool_params\":1"))
              .find("marks a parameter both bool and floating or opaque") != std::string::npos);
    CHECK(load_refusal(with_graph(bytes, "\"bool_params\":1", "\"bool_params\":2")).find("marks parameters it does not have") !=
          std::string::npos);
}

TEST_CASE("save: dynamic extents that may differ are traced apart, so a call may give them any values") {
    // x and a mask, both (batch, length): the two batches must be equal, as must the two lengths, but a batch and a
    // length are independent. save finds that grouping (the first tried, all four apart, fails to broadcast).
    auto masked_mean = kiln::function([](const kiln::tensor& x, const kiln::tensor& m) {
        return std::make_tuple(kiln::sum(x * m, {1}) / kiln::sum(m, {1}), kiln::mean(x, {1}) + 1.0);
    });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float64, {kiln::dyn, kiln::dyn}), kiln::spec(kiln::float64, {kiln::dyn, kiln::dyn})};
    const std::string path = temp_path("masked_mean.kfn");
    kiln::save(masked_mean, sig, path);
    const kiln::loaded_function f = kiln::load(path);
    const std::string onnx = kiln::onnx_bytes(masked_mean, sig);
    const kiln::loaded_function g = kiln::load_onnx_bytes(onnx.data(), onnx.size());
    for (const auto& [b, l] : std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>{{3, 5}, {4, 4}, {6, 2}, {1, 7}, {2, 1}}) {
        std::vector<double> xv, mv, want_masked, want_mean;
        for (std::ptrdiff_t i = 0; i < b; ++i) {
            double s = 0, c = 0, all = 0;
            for (std::ptrdiff_t j = 0; j < l; ++j) {
                const double x = static_cast<double>(i) - 0.25 * static_cast<double>(j), m = j % 2 == 1 && i % 2 == 0 ? 0.0 : 1.0;
                xv.push_back(x), mv.push_back(m);
                s += x * m, c += m, all += x;
            }
            want_masked.push_back(s / c);
            want_mean.push_back(all / static_cast<double>(l) + 1.0);
        }
        for (const kiln::loaded_function* h : {&f, &g}) {
            const std::vector<kiln::tensor> out = (*h)(kiln::from_vector(xv, {b, l}), kiln::from_vector(mv, {b, l}));
            REQUIRE(out.size() == 2);
            CHECK(out[0].shape() == kiln::dims{b});
            for (std::size_t i = 0; i < want_masked.size(); ++i) {
                CHECK(values(out[0])[i] == doctest::Approx(want_masked[i]).epsilon(1e-14));
                CHECK(values(out[1])[i] == doctest::Approx(want_mean[i]).epsilon(1e-14));
            }
        }
    }
    // The batches of x and of the mask were traced equal: a call must keep them equal.
    CHECK_THROWS_WITH_AS(f(kiln::zeros({3, 5}, kiln::float64), kiln::zeros({4, 5}, kiln::float64)),
                         doctest::Contains("must be equal in a call"), kiln::shape_error);
    CHECK_THROWS_AS(g(kiln::zeros({3, 5}, kiln::float64), kiln::zeros({4, 5}, kiln::float64)), kiln::shape_error);
    // The ONNX graph names the batch and the length apart, each shared by both inputs.
    CHECK(onnx.find("dim0") != std::string::npos);
    CHECK(onnx.find("dim1") != std::string::npos);
    CHECK(onnx.find("dim2") == std::string::npos);

    // A causal self-attention with a dynamic batch and length: saved apart, so any batch and length run from the file.
    kiln::generator gen(5);
    auto mha = kiln::nn::multi_head_attention(8, 2, true, gen);
    auto attend = kiln::function([&](const kiln::tensor& x) { return mha(x); });
    const std::string apath = temp_path("attention.kfn");
    kiln::save(attend, {kiln::spec(kiln::float32, {kiln::dyn, kiln::dyn, 8})}, apath);
    const kiln::loaded_function a = kiln::load(apath);
    CHECK(a.traced_extents() == std::vector<std::ptrdiff_t>{2, 3});
    for (const kiln::dims& shape : {kiln::dims{2, 5, 8}, kiln::dims{3, 4, 8}, kiln::dims{4, 4, 8}, kiln::dims{1, 1, 8}}) {
        const kiln::tensor x = kiln::randn(shape, kiln::float32, gen);
        const kiln::tensor got = a(x)[0];
        CHECK(got.shape() == shape);
        CHECK(values(got) == values(mha(x)));  // (each op by eager mode's kernel: bit for bit)
    }

    // A recurrent layer unrolls its time loop: saved with a dynamic batch and a static length it runs any batch from
    // its file; a dynamic length is refused with the reason (each length is another graph).
    kiln::nn::lstm rnn(3, 4, 2, gen);
    auto recur = kiln::function([&](const kiln::tensor& x) { return rnn(x); });
    const std::string rpath = temp_path("lstm.kfn");
    kiln::save(recur, {kiln::spec(kiln::float32, {kiln::dyn, 5, 3})}, rpath);
    const kiln::loaded_function lr = kiln::load(rpath);
    for (std::ptrdiff_t n : {1, 4}) {
        const kiln::tensor x = kiln::randn({n, 5, 3}, kiln::float32, gen);
        CHECK(values(lr(x)[0]) == values(rnn(x)));
    }
    CHECK_THROWS_WITH_AS(kiln::save(recur, {kiln::spec(kiln::float32, {kiln::dyn, kiln::dyn, 3})}, rpath),
                         doctest::Contains("cannot be saved with dynamic dimensions"), kiln::value_error);

    // Two lengths whose sum a count follows (a mean over a concatenation): apart, the count is on neither extent's
    // line, so save traces them equal and the file asks for equal lengths (a refusal, never a wrong mean).
    auto joined_mean = kiln::function([](const kiln::tensor& a, const kiln::tensor& c) { return kiln::mean(kiln::concat({a, c}, 0) * 3.0); });
    const std::vector<kiln::spec> two{kiln::spec(kiln::float64, {kiln::dyn}), kiln::spec(kiln::float64, {kiln::dyn})};
    kiln::save(joined_mean, two, path);
    const kiln::loaded_function j = kiln::load(path);
    CHECK(values(j(f64({1, 2, 3}, {3}), f64({4, 5, 9}, {3}))[0]) == std::vector<double>{12});
    CHECK(j.traced_extents() == std::vector<std::ptrdiff_t>{2, 2});
    CHECK_THROWS_WITH_AS(j(f64({1, 2}, {2}), f64({4, 5, 9, 3}, {4})), doctest::Contains("must be equal in a call"), kiln::shape_error);
    for (const std::string& p : {path, apath, rpath}) std::remove(p.c_str());
}

TEST_CASE("save and export_onnx: named extents are one extent each, traced apart, and keep their names in the files") {
    auto masked = kiln::function([](const kiln::tensor& x, const kiln::tensor& m) { return kiln::sum(x * m, {1}) / kiln::sum(m, {1}); });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float64, {"batch", "length"}), kiln::spec(kiln::float64, {"batch", "length"})};
    const std::string path = temp_path("named.kfn");
    kiln::save(masked, sig, path);
    const kiln::loaded_function f = kiln::load(path);
    CHECK(kiln::to_string(f.signature()) == "{(batch, length) float64, (batch, length) float64}");
    CHECK(f.traced_extents() == std::vector<std::ptrdiff_t>{2, 3, 2, 3});
    const std::string onnx = kiln::onnx_bytes(masked, sig);
    CHECK(onnx.find("batch") != std::string::npos);
    CHECK(onnx.find("length") != std::string::npos);
    const kiln::loaded_function g = kiln::load_onnx_bytes(onnx.data(), onnx.size());
    CHECK(kiln::to_string(g.signature()) == "{(batch, length) float64, (batch, length) float64}");
    CHECK(kiln::to_string(f.output_signature()) == "{(batch,) float64}");
    CHECK(kiln::to_string(g.output_signature()) == "{(batch,) float64}");
    for (const kiln::loaded_function* h : {&f, &g}) {
        CHECK(values((*h)(kiln::from_values({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3}), kiln::from_values({1.0, 0.0, 1.0, 0.0, 1.0, 1.0}, {2, 3}))[0]) ==
              std::vector<double>{2.0, 5.5});
        CHECK(values((*h)(kiln::ones({4, 4}, kiln::float64), kiln::ones({4, 4}, kiln::float64))[0]) == std::vector<double>(4, 1.0));
        CHECK_THROWS_WITH_AS((*h)(kiln::ones({3, 4}, kiln::float64), kiln::ones({3, 5}, kiln::float64)),
                             doctest::Contains("axis 1 of argument 1 ('length') is 5, but axis 1 of argument 0 is 4: extents of one name must be equal"),
                             kiln::shape_error);
    }
    // A named batch and an unnamed length: the length is found apart from the batch and named dim0 in ONNX.
    const std::vector<kiln::spec> mixed{kiln::spec(kiln::float64, {"batch", kiln::dyn}), kiln::spec(kiln::float64, {"batch", kiln::dyn})};
    kiln::save(masked, mixed, path);
    CHECK(kiln::load(path).traced_extents() == std::vector<std::ptrdiff_t>{2, 3, 2, 3});
    const std::string onnx2 = kiln::onnx_bytes(masked, mixed);
    CHECK(kiln::to_string(kiln::load_onnx_bytes(onnx2.data(), onnx2.size()).signature()) == "{(batch, dim0) float64, (batch, dim0) float64}");
    // Names that say apart what the function needs equal: save does not make them equal, and says why.
    const std::vector<kiln::spec> wrong{kiln::spec(kiln::float64, {"b1", "length"}), kiln::spec(kiln::float64, {"b2", "length"})};
    CHECK_THROWS_WITH_AS(kiln::save(masked, wrong, path),
                         doctest::Contains("traces extents of different names apart, as their names say: extents that the function needs "
                                           "equal must share a name"),
                         kiln::shape_error);
    // The file's names are checked when it is read.
    kiln::save(masked, sig, path);
    const std::string named = [&] {
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    }();
    REQUIRE(load_refusal(named).empty());
    CHECK(load_refusal(with_graph(named, "\"names\":[\"batch\",\"length\"]", "\"names\":[\"batch\"]"))
              .find("argument 0 has 1 names for 2 dimensions") != std::string::npos);
    CHECK(load_refusal(with_graph(named, "\"names\":[\"batch\",\"length\"]", "\"names\":[\"batch\",\"9x\"]"))
              .find("argument 0's name 1 ('9x') is not 1 to 64 letters, digits and underscores") != std::string::npos);
    CHECK(load_refusal(with_graph(named, "\"names\":[\"batch\",\"length\"]", "\"names\":[\"batch\",7]"))
              .find("argument 0's name 1 is not a string") != std::string::npos);
    std::remove(path.c_str());
}

TEST_CASE("a loaded function wrapped in kiln::function runs fused, as the function it was saved from") {
    auto chain = kiln::function([](const kiln::tensor& x, const kiln::tensor& y) { return kiln::relu(x * y + 0.5f * x - y) * 2.0f + y; });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {"n"}), kiln::spec(kiln::float32, {"n"})};
    const std::string path = temp_path("chain.kfn");
    kiln::save(chain, sig, path);
    const kiln::loaded_function loaded = kiln::load(path);
    const std::string onnx = kiln::onnx_bytes(chain, sig);
    const kiln::loaded_function imported = kiln::load_onnx_bytes(onnx.data(), onnx.size());
    auto fused = kiln::function(loaded, loaded.signature());
    auto fused_onnx = kiln::function(imported, imported.signature());
    kiln::generator g(11);
    for (std::ptrdiff_t n : {5, 4099}) {
        const kiln::tensor x = kiln::randn({n}, kiln::float32, g), y = kiln::randn({n}, kiln::float32, g);
        const std::vector<double> want = values(chain(x, y));
        CHECK(values(loaded(x, y)[0]) == want);
        CHECK(values(fused(x, y)[0]) == want);
        CHECK(values(fused_onnx(x, y)[0]) == want);
    }
    CHECK(fused.trace_count() == 1);  // (the signature's named extent: one trace for both lengths)
    // One fused group runs the chain, as in the function it was saved from.
    const std::string graph = kiln::to_string(fused.graph(kiln::zeros({8}), kiln::zeros({8})));
    CHECK(graph.find("relu(") != std::string::npos);
    CHECK(graph.find("[fused 0]") != std::string::npos);
    CHECK(graph.find("[fused 1]") == std::string::npos);
    CHECK_THROWS_WITH_AS(fused(kiln::zeros({3}), kiln::zeros({4})), doctest::Contains("of the same name"), kiln::shape_error);
    std::remove(path.c_str());
}

TEST_CASE("load: a damaged file is refused, naming the file and the node or offset") {
    const std::string good = small_model_bytes();
    REQUIRE(load_refusal(good).empty());
    CHECK(load_refusal(good.substr(0, 10)).find("'bad.kfn': truncated: 10 bytes") != std::string::npos);
    CHECK(load_refusal("KILNFUNX" + good.substr(8)).find("not a kiln function file") != std::string::npos);
    std::string v2 = good;
    v2[8] = 2;
    CHECK(load_refusal(v2).find("format version 2; this kiln reads version 1") != std::string::npos);
    std::string flags = good;
    flags[12] = 1;
    CHECK(load_refusal(flags).find("flags 1 are set") != std::string::npos);
    std::string long_graph = good;
    long_graph[21] = 1;  // a graph length of 2^40 and more
    CHECK(load_refusal(long_graph).find("declares a graph of") != std::string::npos);
    CHECK(load_refusal(good.substr(0, good.size() - 3)).find("reach past") != std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"inputs\":[0,1]", "\"inputs\":[0,7]")).find("node %2 takes node %7 as an input, which does not come before it") !=
          std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"inputs\":[0,1]", "\"inputs\":[0]")).find("node %2 ('matmul' ) takes 2 inputs, not 1") !=
          std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"op\":\"matmul\"", "\"op\":\"matmull\""))
              .find("node %2 is op 'matmull', which the graph's op list does not name") != std::string::npos);
    CHECK(load_refusal(with_graph(with_graph(good, "\"op\":\"matmul\"", "\"op\":\"matmull\""), "\"ops\":{", "\"ops\":{\"matmull\":1,"))
              .find("is not an op kiln can load") != std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"matmul\":1", "\"matmul\":9")).find("op 'matmul' has version 9; this kiln reads version 1") !=
          std::string::npos);
    CHECK(load_refusal(with_graph(good, "keepdims=true", "keepdims=maybe")).find("neither true nor false") != std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"inputs\":[0,1],\"dtype\":\"float32\",\"shape\":[2,2]",
                                  "\"inputs\":[0,1],\"dtype\":\"float64\",\"shape\":[2,2]"))
              .find("node %2 ('matmul') computes (2, 2) float32, but the file says (2, 2) float64") != std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"kind\":\"constant\",\"dtype\":\"float32\",\"shape\":[3,2]",
                                  "\"kind\":\"constant\",\"dtype\":\"float32\",\"shape\":[2,3]"))
              .find("node %1 is (2, 3) float32, but tensor 'node/1' is (3, 2) float32") != std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"inputs\":[0,1],\"dtype\":\"float32\",\"shape\":[2,2]",
                                  "\"inputs\":[0,1],\"dtype\":\"float32\",\"shape\":[1099511627776,1024]"))
              .find("declares a result of shape (1099511627776, 1024) float32, more than") != std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"outputs\":[", "\"outputs\":[99,")).find("output %99 is not a node") != std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"extents\":[2]", "\"extents\":[]")).find("0 traced extents for 1 dynamic dimensions") !=
          std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"format\":", "\"color\":1,\"format\":")).find("unknown field 'color'") != std::string::npos);
    CHECK(load_refusal(with_graph(good, "\"argument\":0", "\"argument\":3")).find("is argument 3 of 1") != std::string::npos);
}

TEST_CASE("load: every single-byte change of a file is loaded or refused with a kiln::error, never a crash") {
    const std::string good = small_model_bytes();
    int loaded = 0, refused = 0;
    for (std::size_t i = 0; i < good.size(); ++i)
        for (const unsigned char x : {0x01, 0x80, 0xff}) {
            std::string b = good;
            b[i] = static_cast<char>(static_cast<unsigned char>(b[i]) ^ x);
            try {
                const kiln::loaded_function f = kiln::load_bytes(b.data(), b.size(), "mutant.kfn", {.max_node_bytes = 1 << 20});
                (void)f(kiln::zeros({2, 3}));
                ++loaded;
            } catch (const kiln::error&) {
                ++refused;
            }
        }
    CHECK(loaded + refused == static_cast<int>(3 * good.size()));
    CHECK(refused > static_cast<int>(good.size()));  // most changes break something the loader checks
}

// ---- ONNX (kiln::export_onnx, kiln::load_onnx): what onnx.checker and ONNX Runtime check is in onnx_check.py ----

namespace {

std::string small_model_onnx() {
    small_model m;
    auto f = kiln::function([m](const kiln::tensor& x) { return m(x); }, {.name = "small"});
    return kiln::onnx_bytes(f, {kiln::spec(kiln::float32, {kiln::dyn, 3})});
}

std::string onnx_refusal(const std::string& bytes) {
    try {
        (void)kiln::load_onnx_bytes(bytes.data(), bytes.size(), "bad.onnx");
    } catch (const kiln::file_error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("ONNX: kiln's export reads back with kiln::load_onnx and computes what the function computes") {
    const std::string bytes = small_model_onnx();
    const kiln::loaded_function f = kiln::load_onnx_bytes(bytes.data(), bytes.size());
    REQUIRE(f.signature().size() == 1);
    CHECK(kiln::to_string(f.signature()[0]) == "(dim0, 3) float32");
    CHECK(kiln::to_string(f.output_signature()) == "{(dim0, 2) float32}");
    small_model m;
    for (std::ptrdiff_t n : {1, 4, 9}) {
        const kiln::tensor x = kiln::randn({n, 3});
        const std::vector<double> got = values(f(x)[0]), want = values(m(x));
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
    }
    // The graph holds ONNX's ops by name.
    CHECK(kiln::to_string(f.graph()).find("Gemm(") != std::string::npos);  // (matmul + bias: one Gemm)
}

TEST_CASE("ONNX export: a traced convolution and pools are one Conv, MaxPool and AveragePool, from the notes the tracer keeps") {
    kiln::generator g(21);
    const kiln::tensor w = kiln::randn({4, 2, 3, 3}, kiln::float32, g), b = kiln::randn({4}, kiln::float32, g);
    auto net = kiln::function([&](const kiln::tensor& x) {
        const kiln::tensor y = kiln::nn::conv2d(x, w, b, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2});
        const kiln::tensor p = kiln::nn::max_pool2d(kiln::relu(y), {2, 2}, {.padding = {1, 1}});
        return kiln::nn::avg_pool2d(p, {2, 2}, {.stride = {1, 1}, .count_include_pad = false, .ceil_mode = false});
    }, {kiln::spec(kiln::float32, {kiln::dyn, 4, 9, 10})});
    const kiln::tensor x = kiln::randn({3, 4, 9, 10}, kiln::float32, g);
    // The graph after the passes: three notes, each naming the value that is the op's result and the values it reads.
    const kiln::function_graph& graph = net.graph(x);
    REQUIRE(graph.composites.size() == 3);
    const kiln::composite_note& conv = graph.composites[0];
    CHECK(conv.op == "conv2d");
    CHECK(conv.attrs == "kernel=3,3 stride=2,1 pads=1,1,0,0 dilation=1,2 groups=2");
    REQUIRE(conv.inputs.size() == 3);
    CHECK(graph.nodes[static_cast<std::size_t>(conv.inputs[0])].kind == kiln::node_kind::argument);
    CHECK(graph.nodes[static_cast<std::size_t>(conv.inputs[1])].shape == kiln::dims{4, 2, 3, 3});  // (kept: its reshape was folded)
    CHECK(graph.nodes[static_cast<std::size_t>(conv.output)].shape == kiln::dims{3, 4, 5, 6});
    CHECK(graph.composites[1].op == "max_pool2d");
    CHECK(graph.composites[1].attrs == "kernel=2,2 stride=2,2 pads=1,1,1,1 dilation=1,1 ceil_mode=false");
    CHECK(graph.composites[2].op == "avg_pool2d");
    CHECK(graph.composites[2].attrs == "kernel=2,2 stride=1,1 pads=0,0,0,0 dilation=1,1 count_include_pad=false");
    CHECK(graph.composites[2].output == graph.outputs[0]);
    // The model: one operator each, none of their parts; kiln reads it back to the function's values.
    const std::string onnx = kiln::onnx_bytes(net, {kiln::spec(kiln::float32, {kiln::dyn, 4, 9, 10})});
    for (const char* op : {"Conv", "MaxPool", "AveragePool"}) CHECK(onnx.find(op) != std::string::npos);
    for (const char* op : {"Slice", "MatMul", "ReduceMax"}) CHECK(onnx.find(op) == std::string::npos);
    const kiln::loaded_function back = kiln::load_onnx_bytes(onnx.data(), onnx.size());
    for (std::ptrdiff_t n : {1, 3}) {
        const kiln::tensor xn = kiln::randn({n, 4, 9, 10}, kiln::float32, g);
        const std::vector<double> got = values(back(xn)[0]), want = values(net(xn));
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
    }
    // A loaded model called inside a kiln::function traces as the ops it runs, so an imported model exports again
    // (its Conv read back through nn/conv.hpp, noted again), computing the same.
    auto again = kiln::function([&](const kiln::tensor& xb) { return back(xb)[0]; });
    const std::string onnx2 = kiln::onnx_bytes(again, {kiln::spec(kiln::float32, {kiln::dyn, 4, 9, 10})});
    CHECK(onnx2.find("Conv") != std::string::npos);
    CHECK(onnx2.find("Slice") == std::string::npos);
    const kiln::loaded_function back2 = kiln::load_onnx_bytes(onnx2.data(), onnx2.size());
    CHECK(kiln::allclose(back2(x)[0], back(x)[0], 0, 0));
    CHECK(kiln::allclose(again(x), back(x)[0], 0, 0));
    // kiln::save writes what the function computes: not the weight that only the note kept.
    const std::string file = temp_path("conv.kfn");
    kiln::save(net, {kiln::spec(kiln::float32, {kiln::dyn, 4, 9, 10})}, file);
    const kiln::loaded_function loaded = kiln::load(file);
    std::remove(file.c_str());
    for (const kiln::graph_node& n : loaded.graph().nodes) CHECK_FALSE(n.shape == kiln::dims{4, 2, 3, 3});
    CHECK(kiln::allclose(loaded(x)[0], net(x), 0, 0));
    // In a training step the gradient's nodes read the notes' parts; the notes stay.
    kiln::variable wv(w.clone());
    std::vector<kiln::variable*> params{&wv};
    kiln::optim::sgd opt(params, 0.1);
    auto step = kiln::function([&](const kiln::tensor& xb) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::sum(kiln::nn::max_pool2d(kiln::nn::conv2d(xb, wv, b, {.groups = 2}), {2, 2}));
        opt.apply_gradients(tape.gradient(loss, params), params);
        return loss;
    });
    const kiln::function_graph& sg = step.graph(x);
    REQUIRE(sg.composites.size() == 2);
    CHECK(sg.nodes[static_cast<std::size_t>(sg.composites[0].inputs[1])].kind == kiln::node_kind::variable);
}

// The function exported to ONNX and read back: none of a normalization's parts written, and `count` nodes of the
// ONNX operator `op` (the loaded graph holds the model's operators by their ONNX names).
template <class F>
kiln::loaded_function exported_normalization(F& net, const std::vector<kiln::spec>& sig, const std::string& op, std::size_t count) {
    const std::string onnx = kiln::onnx_bytes(net, sig);
    for (const char* part : {"ReduceMean", "Sqrt", "Div"}) CHECK(onnx.find(part) == std::string::npos);
    kiln::loaded_function back = kiln::load_onnx_bytes(onnx.data(), onnx.size());
    std::size_t found = 0;
    for (const kiln::graph_node& n : back.graph().nodes) found += n.op == op;
    CHECK(found == count);
    return back;
}

TEST_CASE("ONNX export: nn::conv_transpose2d is one ConvTranspose that reads back as itself; float64 is refused at col2im") {
    kiln::generator g(23);
    const kiln::tensor w = kiln::randn({3, 2, 3, 2}, kiln::float32, g), b = kiln::randn({4}, kiln::float32, g);
    const kiln::nn::conv_transpose2d_options o{.stride = {2, 3}, .padding = {1, 0}, .output_padding = {1, 2}, .groups = 1};
    auto up = kiln::function([&](const kiln::tensor& x) {
        return kiln::nn::conv_transpose2d(x, kiln::concat({w, w}, 1), b, o);
    });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {kiln::dyn, 3, 4, 5})};
    const std::string onnx = kiln::onnx_bytes(up, sig);
    CHECK(onnx.find("ConvTranspose") != std::string::npos);
    CHECK(onnx.find("output_padding") != std::string::npos);
    const kiln::loaded_function back = kiln::load_onnx_bytes(onnx.data(), onnx.size());
    for (std::ptrdiff_t n : {1, 3}) {
        const kiln::tensor x = kiln::randn({n, 3, 4, 5}, kiln::float32, g);
        const kiln::tensor want = up(x);
        CHECK(want.shape() == kiln::dims{n, 4, 8, 16});  // ((5 - 1) * 3 + 1 + 2 + 1)
        CHECK(kiln::allclose(back(x)[0], want, 1e-5, 1e-5));
    }
    // Read back and traced again, it exports as one ConvTranspose again.
    auto again = kiln::function([&](const kiln::tensor& x) { return back(x)[0]; });
    const std::string onnx2 = kiln::onnx_bytes(again, sig);
    CHECK(onnx2.find("ConvTranspose") != std::string::npos);
    CHECK(onnx2.find("MatMul") == std::string::npos);
    // float64: ONNX Runtime's ConvTranspose takes float32, and col2im has no form of its own.
    const kiln::tensor w64 = w.to(kiln::float64);
    auto up64 = kiln::function([&](const kiln::tensor& x) { return kiln::nn::conv_transpose2d(x, w64); });
    CHECK_THROWS_WITH_AS(kiln::onnx_bytes(up64, {kiln::spec(kiln::float64, {2, 3, 4, 5})}), doctest::Contains("col2im"), kiln::value_error);
}

TEST_CASE("ONNX export: nn::layer_norm is one LayerNormalization, and an imported one exports as one again") {
    kiln::generator g(29);
    kiln::nn::layer_norm_layer norm({6});
    norm.w.assign(kiln::randn({6}, kiln::float32, g));
    norm.b.assign(kiln::randn({6}, kiln::float32, g));
    auto net = kiln::function([&](const kiln::tensor& x) { return kiln::nn::layer_norm(kiln::relu(norm(x)), {3, 6}); });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {kiln::dyn, 3, 6})};
    const kiln::loaded_function back = exported_normalization(net, sig, "LayerNormalization", 2);
    const kiln::tensor x = kiln::randn({4, 3, 6}, kiln::float32, g);
    // Read back through nn::layer_norm: the same ops in the same order, so the same bits.
    CHECK(kiln::allclose(back(x)[0], net(x), 0, 0));
    auto again = kiln::function([&](const kiln::tensor& xb) { return back(xb)[0]; });
    const kiln::function_graph& graph = again.graph(x);
    REQUIRE(graph.composites.size() == 2);
    CHECK(graph.composites[0].op == "layer_norm");
    CHECK(graph.composites[1].attrs == "axis=1 epsilon=9.9999997473787516e-06 scale=true bias=false");  // (ONNX's float)
    const std::string onnx2 = kiln::onnx_bytes(again, sig);
    CHECK(onnx2.find("LayerNormalization") != std::string::npos);
    CHECK(onnx2.find("ReduceMean") == std::string::npos);
    // float64 is written as its parts (ONNX Runtime's LayerNormalization is float32 here), which compute the same.
    auto wide = kiln::function([&](const kiln::tensor& x64) { return kiln::nn::layer_norm(x64, {6}); });
    const std::string onnx64 = kiln::onnx_bytes(wide, {kiln::spec(kiln::float64, {2, 6})});
    CHECK(onnx64.find("LayerNormalization") == std::string::npos);
    const kiln::tensor x64 = kiln::randn({2, 6}, kiln::float64, g);
    CHECK(kiln::allclose(kiln::load_onnx_bytes(onnx64.data(), onnx64.size())(x64)[0], wide(x64), 1e-12, 1e-12));
}

TEST_CASE("ONNX export: an evaluating nn::batch_norm_layer is one BatchNormalization; a training one writes and is refused") {
    kiln::generator g(37);
    kiln::nn::batch_norm_layer bn(4);
    bn.w.assign(kiln::randn({4}, kiln::float32, g));
    bn.b.assign(kiln::randn({4}, kiln::float32, g));
    for (int i = 0; i < 3; ++i) (void)bn(kiln::randn({5, 4, 3}, kiln::float32, g) * 3.0f + 1.0f);  // running statistics move
    auto net = kiln::function([&](const kiln::tensor& x) { return bn(x); });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {kiln::dyn, 4, 3})};
    CHECK_THROWS_WITH_AS((void)kiln::onnx_bytes(net, sig), doctest::Contains("writes into tensors"), kiln::value_error);
    bn.eval();
    const kiln::loaded_function back = exported_normalization(net, sig, "BatchNormalization", 1);
    const kiln::tensor x = kiln::randn({2, 4, 3}, kiln::float32, g);
    CHECK(kiln::allclose(back(x)[0], bn(x), 1e-5, 1e-6));
    // Read back through nn::batch_normalization: traced again, the imported model exports as one BatchNormalization.
    auto again = kiln::function([&](const kiln::tensor& xb) { return back(xb)[0]; });
    const kiln::function_graph& graph = again.graph(x);
    REQUIRE(graph.composites.size() == 1);
    CHECK(graph.composites[0].op == "batch_norm");
    CHECK(graph.composites[0].attrs == "epsilon=9.9999997473787516e-06 scale=true bias=true");
    const kiln::loaded_function back2 = exported_normalization(again, sig, "BatchNormalization", 1);
    CHECK(kiln::allclose(back2(x)[0], back(x)[0], 0, 0));
}

TEST_CASE("ONNX export of a model with dropout: refused while it trains (its key is written), dropout absent in eval") {
    kiln::generator g(43);
    kiln::nn::sequential model(kiln::nn::dense(3, 4, kiln::nn::relu, g), kiln::nn::dropout_layer(0.5, g),
                               kiln::nn::dense(4, 2, kiln::nn::identity, g));
    auto net = kiln::function([&](const kiln::tensor& x) { return model(x); });
    const std::vector<kiln::spec> fixed{kiln::spec(kiln::float32, {5, 3})}, sig{kiln::spec(kiln::float32, {kiln::dyn, 3})};
    CHECK_THROWS_WITH_AS((void)kiln::onnx_bytes(net, fixed), doctest::Contains("writes into tensors"), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::save(net, fixed, temp_path("dropout.kfn")), doctest::Contains("writes into tensors"), kiln::value_error);
    CHECK_THROWS_AS((void)kiln::onnx_bytes(net, sig), kiln::value_error);  // (with a dynamic batch: refused as well)
    // Function mode runs it with a declared dynamic batch, at any batch size.
    auto dynamic = kiln::function([&](const kiln::tensor& xb) { return model(xb); }, sig);
    CHECK(dynamic(kiln::randn({5, 3}, kiln::float32, g)).shape() == kiln::dims{5, 2});
    CHECK(dynamic(kiln::randn({2, 3}, kiln::float32, g)).shape() == kiln::dims{2, 2});
    CHECK(dynamic.trace_count() == 1);  // one trace: the key's increment is the same constant at every extent
    model.eval();
    const std::string onnx = kiln::onnx_bytes(net, sig);
    const kiln::loaded_function back = kiln::load_onnx_bytes(onnx.data(), onnx.size());
    const kiln::tensor x = kiln::randn({5, 3}, kiln::float32, g);
    CHECK(kiln::allclose(back(x)[0], model(x), 1e-6, 1e-6));
    // The mode is read while tracing: with the mode as a static argument, each mode has its trace.
    auto by_mode = kiln::function([&](const kiln::tensor& xb, bool training) {
        model.train(training);
        return model(xb);
    });
    const kiln::tensor t1 = by_mode(x, true), e1 = by_mode(x, false), t2 = by_mode(x, true), e2 = by_mode(x, false);
    CHECK(kiln::allclose(e1, e2, 0, 0));
    CHECK(kiln::allclose(e1, back(x)[0], 1e-6, 1e-6));
    CHECK_FALSE(kiln::allclose(t1, t2, 0, 0));  // each training call drops other units
    CHECK(by_mode.trace_count() == 2);
}

TEST_CASE("a checkpoint of a module holds its buffers: batch norm's running statistics resume bit for bit") {
    auto make = [](std::uint64_t seed) {
        kiln::generator g(seed);
        return kiln::nn::sequential(kiln::nn::dense(4, 6, kiln::nn::identity, g), kiln::nn::batch_norm_layer(6),
                                    kiln::nn::activation_layer(kiln::nn::relu), kiln::nn::dense(6, 1, kiln::nn::identity, g));
    };
    kiln::generator data(9);
    std::vector<std::pair<kiln::tensor, kiln::tensor>> batches;
    for (int i = 0; i < 5; ++i) batches.emplace_back(kiln::randn({8, 4}, data) * 2.0f + 1.0f, kiln::randn({8, 1}, data));
    auto step = [](kiln::nn::sequential& m, kiln::optim::adam& opt, const std::pair<kiln::tensor, kiln::tensor>& b) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::mse(m(b.first), b.second);
        opt.apply_gradients(tape.gradient(loss, m.parameters()), m.parameters());
    };
    kiln::nn::sequential a = make(5);
    REQUIRE(a.buffers().size() == 2);
    kiln::optim::adam oa(0.01);
    for (int i = 0; i < 3; ++i) step(a, oa, batches[static_cast<std::size_t>(i)]);
    const std::string path = temp_path("module.safetensors"), params_only = temp_path("params_only.safetensors");
    kiln::save_checkpoint(path, a, oa);
    kiln::save_checkpoint(params_only, a.parameters(), oa);
    for (int i = 3; i < 5; ++i) step(a, oa, batches[static_cast<std::size_t>(i)]);
    // Another start, loaded: the same two steps give the same bits, running statistics included.
    kiln::nn::sequential b = make(6);
    kiln::optim::adam ob(0.01);
    kiln::load_checkpoint(path, b, ob);
    for (int i = 3; i < 5; ++i) step(b, ob, batches[static_cast<std::size_t>(i)]);
    const std::vector<kiln::variable*> pa = a.parameters(), pb = b.parameters(), ba = a.buffers(), bb = b.buffers();
    for (std::size_t i = 0; i < pa.size(); ++i) CHECK(values(*pa[i]) == values(*pb[i]));
    for (std::size_t i = 0; i < ba.size(); ++i) CHECK(values(*ba[i]) == values(*bb[i]));
    CHECK(values(*bb[1]) != std::vector<double>(6, 1.0));  // (the running variance moved)
    a.eval();
    b.eval();
    CHECK(values(a(batches[0].first)) == values(b(batches[0].first)));
    // The file names them; a checkpoint of the parameters alone lacks them, which loading the module says.
    const kiln::tensor_file f = kiln::load_safetensors(path);
    CHECK(f.tensors.count("buffer/0") == 1);
    CHECK(f.tensors.count("buffer/1") == 1);
    kiln::nn::sequential c = make(7);
    kiln::optim::adam oc(0.01);
    CHECK_THROWS_WITH_AS(kiln::load_checkpoint(params_only, c, oc), doctest::Contains("has no tensor 'buffer/0'"), kiln::file_error);
    kiln::load_checkpoint(params_only, c.parameters(), oc);  // (the parameters-only form still reads it)
    std::remove(path.c_str());
    std::remove(params_only.c_str());
}

TEST_CASE("ONNX: an op whose result the file makes larger than max_node_bytes is refused before it allocates") {
    // A Pad of 4 Mi elements (16 MiB) in a model loaded with a 1 MiB limit: the loader's check run refuses it,
    // naming the op, without allocating it (its result there is a placeholder by the op's shape rule; before, the
    // check refused it at the allocation, and before that allocated it and then compared).
    auto f = kiln::function([](const kiln::tensor& x) { return kiln::pad(x, {{0, std::ptrdiff_t{1} << 22}}); }, {.name = "big_pad"});
    const std::string bytes = kiln::onnx_bytes(f, {kiln::spec(kiln::float32, {4})});
    std::string message;
    try {
        (void)kiln::load_onnx_bytes(bytes.data(), bytes.size(), "big.onnx", {.max_node_bytes = 1 << 20});
    } catch (const kiln::file_error& e) {
        message = e.what();
    }
    INFO(message);
    CHECK(message.find("'Pad'") != std::string::npos);
    CHECK(message.find("('Pad') is larger than load_options::max_node_bytes") != std::string::npos);
    // With the default limit the same model loads and runs; the limit is the loader's only (a later call may
    // allocate as much as it needs).
    const kiln::loaded_function g = kiln::load_onnx_bytes(bytes.data(), bytes.size());
    CHECK(g(std::vector<kiln::tensor>{kiln::ones({4})})[0].numel() == 4 + (std::ptrdiff_t{1} << 22));
    // Two such pads joined: the join's result is a placeholder by its rule too (32 MiB under a 24 MiB limit).
    auto joined = kiln::function([](const kiln::tensor& x) {
        const kiln::tensor p = kiln::pad(x, {{0, std::ptrdiff_t{1} << 22}});
        return kiln::concat({p, p});
    }, {.name = "joined_pads"});
    const std::string joined_bytes = kiln::onnx_bytes(joined, {kiln::spec(kiln::float32, {4})});
    CHECK_THROWS_WITH_AS((void)kiln::load_onnx_bytes(joined_bytes.data(), joined_bytes.size(), "joined.onnx", {.max_node_bytes = 24 << 20}),
                         doctest::Contains("('Concat') is larger than load_options::max_node_bytes"), kiln::file_error);
    // An op that runs in the check (a tile of values: x times a constant) is refused at the allocation.
    const kiln::tensor c = kiln::from_values({1.0f, 2.0f, 3.0f, 4.0f}, kiln::dims{4});
    auto tiled = kiln::function([c](const kiln::tensor& x) { return kiln::tile(x * c, {std::ptrdiff_t{1} << 22}); },
                                {.name = "tiled_values"});
    const std::string tiled_bytes = kiln::onnx_bytes(tiled, {kiln::spec(kiln::float32, {4})});
    CHECK_THROWS_WITH_AS((void)kiln::load_onnx_bytes(tiled_bytes.data(), tiled_bytes.size(), "tiled.onnx", {.max_node_bytes = 24 << 20}),
                         doctest::Contains("kiln: value_error in 'allocate': a result of 67108864 bytes is larger than the limit set "
                                           "while a file is checked (25165824 bytes"),
                         kiln::file_error);
}

TEST_CASE("loaded functions give results that share storage apart, as the traced function does") {
    // x * 2 twice is one value in the saved graph (common subexpressions), and ONNX's outputs are Identities of it.
    auto f = kiln::function([](const kiln::tensor& x) { return std::make_tuple(x * 2.0f, x * 2.0f, x); }, {.name = "dup"});
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {kiln::dyn, 2})};
    const std::string path = temp_path("dup.kfn");
    kiln::save(f, sig, path);
    const std::string onnx = kiln::onnx_bytes(f, sig);
    const kiln::loaded_function from_kfn = kiln::load(path), from_onnx = kiln::load_onnx_bytes(onnx.data(), onnx.size());
    for (const kiln::loaded_function* g : {&from_kfn, &from_onnx}) {
        const kiln::tensor x = kiln::ones({3, 2});
        std::vector<kiln::tensor> y = (*g)(x);
        REQUIRE(y.size() == 3);
        y[0] += 1;
        CHECK(values(y[0]) == std::vector<double>(6, 3));
        CHECK(values(y[1]) == std::vector<double>(6, 2));
        CHECK(values(y[2]) == std::vector<double>(6, 1));
    }
    std::remove(path.c_str());
}

TEST_CASE("ONNX: a damaged or unsupported model is refused with a kiln::file_error naming what is wrong") {
    const std::string good = small_model_onnx();
    REQUIRE(onnx_refusal(good).empty());
    CHECK(onnx_refusal("").find("the model has no graph") != std::string::npos);
    CHECK(onnx_refusal(good.substr(0, good.size() / 2)).find("'bad.onnx', byte") != std::string::npos);
    std::string opset = good;
    REQUIRE(opset.substr(opset.size() - 2) == "\x10\x11");  // opset_import's version 17, the last field
    opset[opset.size() - 1] = 0x1d;
    CHECK(onnx_refusal(opset).find("opset 29; kiln reads opsets 13 to 28") != std::string::npos);
    opset[opset.size() - 1] = 0x0c;
    CHECK(onnx_refusal(opset).find("opset 12; kiln reads opsets 13 to 28") != std::string::npos);
    std::string op = good;  // (every "Relu": the node's name and its op_type)
    REQUIRE(op.find("Relu") != std::string::npos);
    for (std::size_t at = op.find("Relu"); at != std::string::npos; at = op.find("Relu", at)) op.replace(at, 4, "Relv");
    CHECK(onnx_refusal(op).find("ONNX op 'Relv' has no reading in kiln") != std::string::npos);
    // Every single-byte change is loaded or refused with a kiln::error.
    int handled = 0;
    for (std::size_t i = 0; i < good.size(); ++i) {
        std::string b = good;
        b[i] = static_cast<char>(static_cast<unsigned char>(b[i]) ^ 0x5a);
        try {
            const kiln::loaded_function f = kiln::load_onnx_bytes(b.data(), b.size(), "mutant.onnx", {.max_node_bytes = 1 << 20});
            (void)f(kiln::zeros({2, 3}));
        } catch (const kiln::error&) {
        }
        ++handled;
    }
    CHECK(handled == static_cast<int>(good.size()));
}

TEST_CASE("ONNX export: an op opset 17 cannot express is refused, naming the node and the op") {
    auto f = kiln::function([](const kiln::tensor& a) { return kiln::bitwise_and(a, a * 2) + 1; }, {.name = "bits"});
    CHECK_THROWS_WITH_AS((void)kiln::onnx_bytes(f, {kiln::spec(kiln::int32, {4})}),
                         doctest::Contains("('bitwise_and') cannot be exported to ONNX: ONNX opset 17 has no operator"),
                         kiln::value_error);
    // On bools the bitwise ops are the logical ones, which ONNX has.
    auto g = kiln::function([](const kiln::tensor& a) { return kiln::bitwise_and(a, kiln::logical_not(a)); });
    CHECK(!kiln::onnx_bytes(g, {kiln::spec(kiln::bool_, {4})}).empty());
    // argsort and sort: ONNX's TopK promises neither kiln's stable ties nor NaN last.
    auto s = kiln::function([](const kiln::tensor& a) { return kiln::sort(a, 0); }, {.name = "sorted"});
    CHECK_THROWS_WITH_AS((void)kiln::onnx_bytes(s, {kiln::spec(kiln::float32, {5})}),
                         doctest::Contains("('argsort' axis=0 descending=false) cannot be exported to ONNX: ONNX's "
                                           "TopK neither promises a stable order for ties nor places NaN last"),
                         kiln::value_error);
}

TEST_CASE("saved random programs load and give eager mode's results, static and with a dynamic batch") {
    // The random programs of test/function.cpp (test/random_programs.hpp), each traced, saved with static specs
    // and with a kiln::dyn batch, loaded back and called on new values (and, with the dynamic batch, on another
    // batch): every result must be eager mode's, and a call that eager mode refuses must be refused too. `save`
    // may refuse a program only with a kiln::value_error (writes into tensors, dimensions one trace cannot serve),
    // never write a file that `load` rejects. KILN_RANDOM_PROGRAMS sets how many seeds (default 200).
    namespace rp = kiln_test::random_programs;
    const char* env = std::getenv("KILN_RANDOM_PROGRAMS");
    const std::uint32_t count = env ? static_cast<std::uint32_t>(std::atoi(env)) : 200;
    const std::string path = temp_path("random_program.kfn");
    std::size_t saved = 0, named_axes = 0;
    for (std::uint32_t seed = 0; seed < count; ++seed) {
        rp::setup su{};
        const std::vector<rp::step> program = rp::make(seed, su);
        for (const bool dynamic : {false, true}) {
            CAPTURE(seed);
            CAPTURE(dynamic);
            CAPTURE(rp::describe(program));
            // (The dynamic batch is kiln::dyn for even seeds and the name "batch" for odd ones.)
            const bool named = dynamic && seed % 2 == 1;
            const kiln::spec_extent b = named ? kiln::spec_extent("batch") : kiln::spec_extent(dynamic ? kiln::dyn : su.batch);
            const std::vector<kiln::spec> specs{kiln::spec(su.dtype, {b, su.features}), kiln::spec(su.dtype, {su.features}),
                                                kiln::spec(su.dtype, {b, 1}), kiln::spec(su.dtype, {b, su.features})};
            auto traced = kiln::function(
                [&](const kiln::tensor& a0, const kiln::tensor& a1, const kiln::tensor& a2, const kiln::tensor& a3) {
                    return rp::results(program, su, {a0, a1, a2, a3}, false);
                },
                {.name = "random_program"});
            std::remove(path.c_str());
            try {
                kiln::save(traced, specs, path);
            } catch (const kiln::value_error&) {
                CHECK(!std::ifstream(path).good());
                continue;
            } catch (const kiln::shape_error&) {
                continue;  // the program does not hold at the extents save traces with (eager mode refuses them too)
            }
            ++saved;
            const kiln::loaded_function f = kiln::load(path);
            const double tol = su.dtype == kiln::float64 ? 1e-11 : 2e-5;
            kiln::generator g(seed + 1000);
            const std::int64_t batches[] = {su.batch, su.other_batch, su.batch};
            for (int call = 0; call < (dynamic ? 3 : 1); ++call) {
                CAPTURE(call);
                const std::vector<kiln::tensor> args = rp::arguments(su, batches[call], g);
                std::vector<kiln::tensor> expect;
                bool eager_refused = false;
                try {
                    expect = rp::results(program, su, args, false);
                } catch (const kiln::error&) {
                    eager_refused = true;
                }
                if (eager_refused) {
                    CHECK_THROWS_AS((void)f(args), kiln::error);
                    continue;
                }
                const std::vector<kiln::tensor> got = f(args);
                CHECK(rp::compare(expect, got, tol) == "");
                // The output signature holds for this call: its static extents, and its extents named "batch".
                const std::vector<kiln::spec> outs = f.output_signature();
                REQUIRE(outs.size() == got.size());
                for (std::size_t k = 0; k < got.size(); ++k) {
                    CHECK(outs[k].dtype == got[k].dtype());
                    REQUIRE(outs[k].shape.size() == static_cast<std::size_t>(got[k].dim()));
                    for (std::size_t i = 0; i < outs[k].shape.size(); ++i) {
                        const std::ptrdiff_t e = got[k].shape()[static_cast<int>(i)];
                        if (outs[k].shape[i] != kiln::dyn) CHECK(e == outs[k].shape[i]);
                        if (outs[k].name_of(i) == "batch") CHECK(e == batches[call]);
                        named_axes += outs[k].name_of(i) == "batch";
                    }
                }
            }
        }
    }
    CHECK(named_axes > 0);
    // Of the 2 x count attempts about half save (2,826 of 6,000 for 3,000 seeds); the rest write into tensors, which a
    // file cannot hold, or hold only at some extents.
    CHECK(saved * 5 >= count * 4);
    std::remove(path.c_str());
}

TEST_CASE("a loaded function's output signature: static extents fixed, and an extent named after the input extent it equals") {
    kiln::nn::dense layer(8, 4, kiln::nn::identity);
    auto classify = kiln::function([&](const kiln::tensor& x) {
        const kiln::tensor logits = layer(x);
        return std::make_tuple(kiln::nn::softmax(logits, -1), kiln::argmax(logits, 1), logits.reshape({-1}), logits.transpose(0, 1),
                               kiln::sum(logits, {0}), x.slice(1, 2, 5).unsqueeze(0));
    });
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {"batch", 8})};
    const std::string path = temp_path("classify.kfn");
    kiln::save(classify, sig, path);
    const std::string onnx = kiln::onnx_bytes(classify, sig);
    const kiln::loaded_function f = kiln::load(path), g = kiln::load_onnx_bytes(onnx.data(), onnx.size());
    std::remove(path.c_str());
    const std::string want = "{(batch, 4) float32, (batch,) int64, (?,) float32, (4, batch) float32, (4,) float32, (1, batch, 3) float32}";
    CHECK(kiln::to_string(f.output_signature()) == want);
    CHECK(kiln::to_string(g.output_signature()) == want);
    // What calls return agrees with it at other batches.
    for (std::ptrdiff_t n : {1, 5}) {
        const std::vector<kiln::tensor> out = f({kiln::randn({n, 8})});
        const std::vector<kiln::spec> sig_out = f.output_signature();
        REQUIRE(out.size() == sig_out.size());
        for (std::size_t k = 0; k < out.size(); ++k) {
            CHECK(out[k].dtype() == sig_out[k].dtype);
            REQUIRE(static_cast<std::size_t>(out[k].dim()) == sig_out[k].shape.size());
            for (std::size_t i = 0; i < sig_out[k].shape.size(); ++i) {
                if (sig_out[k].shape[i] != kiln::dyn) CHECK(out[k].shape()[static_cast<int>(i)] == sig_out[k].shape[i]);
                if (sig_out[k].name_of(i) == "batch") CHECK(out[k].shape()[static_cast<int>(i)] == n);
            }
        }
    }
    // Without names the dynamic extents print as '?'; a function without dynamic extents has a static one.
    kiln::save(classify, {kiln::spec(kiln::float32, {kiln::dyn, 8})}, path);
    CHECK(kiln::to_string(kiln::load(path).output_signature()) ==
          "{(?, 4) float32, (?,) int64, (?,) float32, (4, ?) float32, (4,) float32, (1, ?, 3) float32}");
    kiln::save(classify, {kiln::spec(kiln::float32, {3, 8})}, path);
    CHECK(kiln::to_string(kiln::load(path).output_signature()) ==
          "{(3, 4) float32, (3,) int64, (12,) float32, (4, 3) float32, (4,) float32, (1, 3, 3) float32}");
    std::remove(path.c_str());
    CHECK_THROWS_AS((void)kiln::loaded_function().output_signature(), kiln::value_error);
}
