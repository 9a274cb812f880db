// The kiln side of the differential test against NumPy (test/numpy_differential.py writes the cases and checks
// the answers). Reads a case file of small programs over .npy inputs, runs each program in eager mode and writes
// its result as <out>/<case>.npy, or the name of the kiln::error it threw as <out>/<case>.err.
//
// Case file, one statement per line:
//   case <id>
//   load <name> <file.npy>
//   op <name> <op> <input tensors and attributes...>   (any op of kiln's registry, or a call form below)
//   out <name>
#include <kiln/kiln.hpp>

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

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: numpy_runner <cases.txt> <output directory>\n";
        return 2;
    }
    std::ifstream in(argv[1]);
    if (!in) {
        std::cerr << "numpy_runner: cannot read " << argv[1] << "\n";
        return 2;
    }
    const std::string out_dir = argv[2];
    std::map<std::string, kiln::tensor> env;
    std::string id, error;
    int cases = 0;
    for (std::string line; std::getline(in, line);) {
        std::stringstream ss(line);
        std::string word;
        ss >> word;
        if (word.empty()) continue;
        if (word == "case") {
            ss >> id;
            env.clear();
            error.clear();
            ++cases;
            continue;
        }
        if (!error.empty()) continue;  // the case already failed; skip to its end
        try {
            if (word == "load") {
                std::string name, path;
                ss >> name >> path;
                env[name] = kiln::load_npy(path);
            } else if (word == "op") {
                std::string dst, op;
                ss >> dst >> op;
                std::vector<std::string> args;
                for (std::string x; ss >> x;) args.push_back(x);
                env[dst] = apply(op, args, env);
            } else if (word == "out") {
                std::string name;
                ss >> name;
                kiln::save_npy(out_dir + "/" + id + ".npy", env.at(name));
            }
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
    }
    std::cout << "numpy_runner: ran " << cases << " cases\n";
    return 0;
}
