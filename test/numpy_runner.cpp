// The kiln side of the differential test against NumPy (test/numpy_differential.py writes the cases and checks
// the answers). Reads a case file of small programs over .npy inputs, runs each program in eager mode and writes
// its result as <out>/<case>.npy, or the name of the kiln::error it threw as <out>/<case>.err.
//
// Case file, one statement per line:
//   case <id>
//   load <name> <file.npy>
//   op <name> <op> <input tensors and attributes...>   (any op of kiln's registry, or a call form below)
//   out <name>
// With --onnx, each case that runs is also traced as a kiln::function of its inputs and exported as ONNX
// (<out>/<case>.onnx, or the reason it cannot be in <out>/<case>.onnx.err), for test/onnx_differential.py.
#include <kiln/io.hpp>

#include <fstream>
#include <functional>
#include <optional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

// A number operand as the C++ type kiln sees: an int64 when written without '.', 'e' or "nan", a double otherwise.
template <class F>
kiln::tensor with_number(const std::string& s, F&& f) {
    if (s.find_first_of(".eEn") == std::string::npos) return f(static_cast<std::int64_t>(std::stoll(s)));
    return f(std::stod(s));
}

// The statements that exercise C++ call forms rather than ops (a C++ number as an operand, in-place updates of
// views); nullopt for every other name.
std::optional<kiln::tensor> call_form(const std::string& op, const std::vector<std::string>& a,
                                      const std::function<const kiln::tensor&(std::size_t)>& t) {
    // where with a number in one branch: op <dst> where_ts <c> <t> <number> (or where_st <c> <number> <t>).
    if (op == "where_ts" || op == "where_st") {
        return with_number(a.at(2), [&](auto v) -> kiln::tensor {
            if (op == "where_ts") return kiln::where(t(0), t(1), v);
            return kiln::where(t(0), v, t(1));
        });
    }
    if (op == "clamp_unit") return kiln::clamp(t(0), -1, 1);
    if (op == "leaky_relu" && a.size() == 1) return kiln::leaky_relu(t(0));  // the default slope, a C++ number
    // In place on two views of one copy: op <dst> iadd_view <x> <axis> <dst start> <src start> <length>, or
    // op <dst> iadd_transpose <x> (a square matrix plus its own transpose).
    if (op == "iadd_view") {
        kiln::tensor c = t(0).clone();
        const int axis = std::stoi(a.at(1));
        const std::ptrdiff_t d = std::stoll(a.at(2)), src = std::stoll(a.at(3)), n = std::stoll(a.at(4));
        kiln::tensor target = c.slice(axis, d, d + n);
        target += c.slice(axis, src, src + n);
        return c;
    }
    if (op == "iadd_transpose") {
        kiln::tensor c = t(0).clone();
        c += c.transpose(0, 1);
        return c;
    }
    // A C++ scalar on one side: a double for floating tensors, an integer for integer ones.
    if (op == "adds" || op == "muls" || op == "rsubs" || op == "divs" || op == "rdivs") {
        return with_number(a.at(1), [&](auto v) -> kiln::tensor {
            if (op == "adds") return t(0) + v;
            if (op == "muls") return t(0) * v;
            if (op == "divs") return t(0) / v;
            if (op == "rdivs") return v / t(0);
            return v - t(0);
        });
    }
    return std::nullopt;
}

// One statement "op <dst> <name> args..." evaluated on the named tensors. Every op is found in kiln's registry by
// its name: the arguments that name tensors are its inputs, in order; the others are its attributes, as
// key=value or by position in the order of the op's schema, parsed by the schema's kinds.
kiln::tensor apply(const std::string& op, const std::vector<std::string>& a, std::map<std::string, kiln::tensor>& env) {
    auto t = [&](std::size_t i) -> const kiln::tensor& {
        auto found = env.find(a.at(i));
        if (found == env.end()) throw std::runtime_error("numpy_runner: unknown tensor " + a.at(i));
        return found->second;
    };
    if (auto r = call_form(op, a, t)) return *r;
    const kiln::op_schema* schema = kiln::find_op_or_null(op);
    if (!schema) throw std::runtime_error("numpy_runner: unknown op " + op);
    std::vector<kiln::tensor> inputs;
    kiln::attributes attrs;
    std::size_t position = 0;
    for (const std::string& word : a) {
        if (auto found = env.find(word); found != env.end()) {
            inputs.push_back(found->second);
        } else if (const std::size_t eq = word.find('='); eq != std::string::npos) {
            const std::string key = word.substr(0, eq);
            attrs.set(key, kiln::parse_attribute(*schema, key, word.substr(eq + 1)));
        } else {
            if (position >= schema->attrs.size())
                throw std::runtime_error("numpy_runner: too many attributes for " + op + ": " + word);
            const std::string& key = schema->attrs[position++].name;
            attrs.set(key, kiln::parse_attribute(*schema, key, word));
        }
    }
    return schema->apply(inputs, attrs);
}

// Runs one case's statements on `env`; the name of the tensor its `out` statement writes, or empty.
std::string run_statements(const std::vector<std::string>& lines, std::map<std::string, kiln::tensor>& env, bool load) {
    std::string out;
    for (const std::string& line : lines) {
        std::stringstream ss(line);
        std::string word;
        ss >> word;
        if (word == "load") {
            std::string name, path;
            ss >> name >> path;
            if (load) env[name] = kiln::load_npy(path);
        } else if (word == "op") {
            std::string dst, op;
            ss >> dst >> op;
            std::vector<std::string> args;
            for (std::string x; ss >> x;) args.push_back(x);
            env[dst] = apply(op, args, env);
        } else if (word == "out") {
            ss >> out;
        }
    }
    return out;
}

// --onnx: the case's program traced as a kiln::function of its loaded inputs and exported to <out>/<case>.onnx;
// <out>/<case>.onnx.err holds the reason when it cannot be exported.
void export_case(const std::string& id, const std::vector<std::string>& lines, const std::string& out_dir) {
    std::vector<std::string> names;
    std::vector<kiln::tensor> inputs;
    for (const std::string& line : lines) {
        std::stringstream ss(line);
        std::string word, name, path;
        ss >> word >> name >> path;
        if (word == "load") {
            names.push_back(name);
            inputs.push_back(kiln::load_npy(path));
        }
    }
    std::vector<kiln::spec> specs;
    for (const kiln::tensor& t : inputs) specs.emplace_back(t.dtype(), std::vector<std::ptrdiff_t>(t.shape().d.begin(), t.shape().d.begin() + t.dim()));
    auto body = [&](const std::vector<kiln::tensor>& args) {
        std::map<std::string, kiln::tensor> env;
        for (std::size_t i = 0; i < args.size(); ++i) env[names[i]] = args[i];
        return env.at(run_statements(lines, env, false));
    };
    const std::string path = out_dir + "/" + id + ".onnx";
    try {
        switch (inputs.size()) {
            case 1: kiln::export_onnx(kiln::function([&](const kiln::tensor& a) { return body({a}); }), specs, path); break;
            case 2:
                kiln::export_onnx(kiln::function([&](const kiln::tensor& a, const kiln::tensor& b) { return body({a, b}); }), specs, path);
                break;
            case 3:
                kiln::export_onnx(kiln::function([&](const kiln::tensor& a, const kiln::tensor& b, const kiln::tensor& c) {
                    return body({a, b, c});
                }), specs, path);
                break;
            case 4:
                kiln::export_onnx(kiln::function([&](const kiln::tensor& a, const kiln::tensor& b, const kiln::tensor& c,
                                                     const kiln::tensor& d) { return body({a, b, c, d}); }), specs, path);
                break;
            case 5:
                kiln::export_onnx(kiln::function([&](const kiln::tensor& a, const kiln::tensor& b, const kiln::tensor& c,
                                                     const kiln::tensor& d, const kiln::tensor& e) { return body({a, b, c, d, e}); }),
                                  specs, path);
                break;
            case 6:
                kiln::export_onnx(kiln::function([&](const kiln::tensor& a, const kiln::tensor& b, const kiln::tensor& c,
                                                     const kiln::tensor& d, const kiln::tensor& e, const kiln::tensor& f) {
                    return body({a, b, c, d, e, f});
                }), specs, path);
                break;
            default: std::ofstream(path + ".err") << "inputs: " << inputs.size() << " (export takes at most 6)\n"; return;
        }
    } catch (const kiln::error& e) {
        std::ofstream(path + ".err") << e.what() << "\n";
    } catch (const std::exception& e) {
        std::ofstream(path + ".err") << "exception: " << e.what() << "\n";
    }
}

}  // namespace

int main(int argc, char** argv) {
    const bool onnx = argc == 4 && std::string(argv[3]) == "--onnx";
    if (argc != 3 && !onnx) {
        std::cerr << "usage: numpy_runner <cases.txt> <output directory> [--onnx]\n";
        return 2;
    }
    std::ifstream in(argv[1]);
    if (!in) {
        std::cerr << "numpy_runner: cannot read " << argv[1] << "\n";
        return 2;
    }
    const std::string out_dir = argv[2];
    // Each case's statements, then the case run eagerly (its result as .npy or its error as .err).
    std::vector<std::pair<std::string, std::vector<std::string>>> cases;
    for (std::string line; std::getline(in, line);) {
        std::stringstream ss(line);
        std::string word;
        ss >> word;
        if (word.empty()) continue;
        if (word == "case") {
            std::string id;
            ss >> id;
            cases.emplace_back(id, std::vector<std::string>{});
        } else if (!cases.empty()) {
            cases.back().second.push_back(line);
        }
    }
    for (const auto& [id, lines] : cases) {
        std::map<std::string, kiln::tensor> env;
        std::string error;
        try {
            const std::string out = run_statements(lines, env, true);
            if (!out.empty()) kiln::save_npy(out_dir + "/" + id + ".npy", env.at(out));
        } catch (const kiln::shape_error&) {
            error = "shape_error";
        } catch (const kiln::dtype_error&) {
            error = "dtype_error";
        } catch (const kiln::value_error&) {
            error = "value_error";
        } catch (const kiln::file_error& e) {
            error = std::string("file_error: ") + e.what();
        } catch (const kiln::error& e) {
            error = std::string("error: ") + e.what();
        }
        if (!error.empty()) std::ofstream(out_dir + "/" + id + ".err") << error << "\n";
        else if (onnx) export_case(id, lines, out_dir);
    }
    std::cout << "numpy_runner: ran " << cases.size() << " cases\n";
    return 0;
}
