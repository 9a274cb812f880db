// The kiln side of the differential test against NumPy (test/numpy_differential.py writes the cases and checks
// the answers). Reads a case file of small programs over .npy inputs, runs each program in eager mode and writes
// its result as <out>/<case>.npy, or the name of the kiln::error it threw as <out>/<case>.err.
//
// Case file, one statement per line:
//   case <id>
//   load <name> <file.npy>
//   op <name> <op> <operands and arguments...>
//   out <name>
#include <kiln/kiln.hpp>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<int> int_list(const std::string& text) {
    std::vector<int> out;
    if (text == "all") return out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
    return out;
}

kiln::dims dims_list(const std::string& text) {
    const std::vector<int> v = int_list(text);
    kiln::dims d;
    d.assign(v.begin(), v.size());
    return d;
}

kiln::dtype dtype_named(const std::string& n) {
    if (n == "float32") return kiln::float32;
    if (n == "float64") return kiln::float64;
    if (n == "int32") return kiln::int32;
    if (n == "int64") return kiln::int64;
    if (n == "bool") return kiln::bool_;
    throw std::runtime_error("numpy_runner: unknown dtype " + n);
}

// A number operand as the C++ type kiln sees: an int64 when written without '.', 'e' or "nan", a double otherwise.
template <class F>
kiln::tensor with_number(const std::string& s, F&& f) {
    if (s.find_first_of(".eEn") == std::string::npos) return f(static_cast<std::int64_t>(std::stoll(s)));
    return f(std::stod(s));
}

// One statement "op <dst> <name> args..." evaluated on the named tensors.
kiln::tensor apply(const std::string& op, const std::vector<std::string>& a, std::map<std::string, kiln::tensor>& env) {
    auto t = [&](std::size_t i) -> const kiln::tensor& {
        auto found = env.find(a.at(i));
        if (found == env.end()) throw std::runtime_error("numpy_runner: unknown tensor " + a.at(i));
        return found->second;
    };
    auto tensors_from = [&](std::size_t first) {
        std::vector<kiln::tensor> ts;
        for (std::size_t i = first; i < a.size(); ++i) ts.push_back(t(i));
        return ts;
    };
    // Unary ops of the vocabulary.
    if (op == "neg") return -t(0);
    if (op == "abs") return kiln::abs(t(0));
    if (op == "exp") return kiln::exp(t(0));
    if (op == "log") return kiln::log(t(0));
    if (op == "sqrt") return kiln::sqrt(t(0));
    if (op == "rsqrt") return kiln::rsqrt(t(0));
    if (op == "square") return kiln::square(t(0));
    if (op == "sin") return kiln::sin(t(0));
    if (op == "cos") return kiln::cos(t(0));
    if (op == "tanh") return kiln::tanh(t(0));
    if (op == "sigmoid") return kiln::sigmoid(t(0));
    if (op == "relu") return kiln::relu(t(0));
    if (op == "floor") return kiln::floor(t(0));
    if (op == "ceil") return kiln::ceil(t(0));
    if (op == "trunc") return kiln::trunc(t(0));
    if (op == "round") return kiln::round(t(0));
    if (op == "sign") return kiln::sign(t(0));
    if (op == "isnan") return kiln::isnan(t(0));
    if (op == "isinf") return kiln::isinf(t(0));
    if (op == "isfinite") return kiln::isfinite(t(0));
    if (op == "tan") return kiln::tan(t(0));
    if (op == "asin") return kiln::asin(t(0));
    if (op == "acos") return kiln::acos(t(0));
    if (op == "atan") return kiln::atan(t(0));
    if (op == "log1p") return kiln::log1p(t(0));
    if (op == "expm1") return kiln::expm1(t(0));
    if (op == "erf") return kiln::erf(t(0));
    if (op == "softplus") return kiln::softplus(t(0));
    if (op == "silu") return kiln::silu(t(0));
    if (op == "gelu") return kiln::gelu(t(0));
    if (op == "elu") return kiln::elu(t(0));
    if (op == "leaky_relu") return kiln::leaky_relu(t(0));
    if (op == "clamp_unit") return kiln::clamp(t(0), -1, 1);
    if (op == "atan2") return kiln::atan2(t(0), t(1));
    // Binary ops with broadcasting and promotion.
    if (op == "add") return t(0) + t(1);
    if (op == "sub") return t(0) - t(1);
    if (op == "mul") return t(0) * t(1);
    if (op == "div") return t(0) / t(1);
    if (op == "pow") return kiln::pow(t(0), t(1));
    if (op == "maximum") return kiln::maximum(t(0), t(1));
    if (op == "minimum") return kiln::minimum(t(0), t(1));
    if (op == "less") return t(0) < t(1);
    if (op == "greater_equal") return t(0) >= t(1);
    if (op == "equal") return kiln::equal(t(0), t(1));
    if (op == "where") return kiln::where(t(0), t(1), t(2));
    if (op == "floor_divide") return kiln::floor_divide(t(0), t(1));
    if (op == "remainder") return kiln::remainder(t(0), t(1));
    if (op == "logical_and") return kiln::logical_and(t(0), t(1));
    if (op == "logical_or") return kiln::logical_or(t(0), t(1));
    if (op == "logical_xor") return kiln::logical_xor(t(0), t(1));
    if (op == "logical_not") return kiln::logical_not(t(0));
    // where with a number in one branch: op <dst> where_ts <c> <t> <number> (or where_st <c> <number> <t>).
    if (op == "where_ts" || op == "where_st") {
        return with_number(a.at(2), [&](auto v) -> kiln::tensor {
            if (op == "where_ts") return kiln::where(t(0), t(1), v);
            return kiln::where(t(0), v, t(1));
        });
    }
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
    // Reductions: op <dst> <kind> <x> <axes|all> <keepdims>.
    if (op == "sum" || op == "mean" || op == "max" || op == "min" || op == "prod") {
        const std::vector<int> axes = int_list(a.at(1));
        const bool keep = a.at(2) == "1";
        if (op == "sum") return kiln::sum(t(0), axes, keep);
        if (op == "mean") return kiln::mean(t(0), axes, keep);
        if (op == "max") return kiln::max(t(0), axes, keep);
        if (op == "min") return kiln::min(t(0), axes, keep);
        return kiln::prod(t(0), axes, keep);
    }
    if (op == "argmax") return kiln::argmax(t(0), std::stoi(a.at(1)), a.at(2) == "1");
    if (op == "argmin") return kiln::argmin(t(0), std::stoi(a.at(1)), a.at(2) == "1");
    // Products, views and joins.
    if (op == "matmul") return kiln::matmul(t(0), t(1));
    if (op == "transpose") return t(0).transpose(std::stoi(a.at(1)), std::stoi(a.at(2)));
    if (op == "reshape") return t(0).reshape(dims_list(a.at(1)));
    if (op == "flip") return kiln::flip(t(0), {std::stoi(a.at(1))});
    if (op == "cumsum") return kiln::cumsum(t(0), std::stoi(a.at(1)));
    if (op == "sort") return kiln::sort(t(0), std::stoi(a.at(1)));
    if (op == "argsort") return kiln::argsort(t(0), std::stoi(a.at(1)));
    if (op == "any") return kiln::any(t(0));
    if (op == "all") return kiln::all(t(0));
    if (op == "var") return kiln::var(t(0), {std::stoi(a.at(1))});
    if (op == "std") return kiln::std(t(0), {std::stoi(a.at(1))});
    if (op == "tile") {
        std::vector<std::ptrdiff_t> reps;
        for (int r : int_list(a.at(1))) reps.push_back(r);
        return kiln::tile(t(0), reps);
    }
    if (op == "repeat") return kiln::repeat(t(0), std::stoll(a.at(1)), std::stoi(a.at(2)));
    if (op == "take") {
        std::vector<std::int64_t> idx;
        for (int i : int_list(a.at(2))) idx.push_back(i);
        return kiln::index_select(t(0), std::stoi(a.at(1)), kiln::from_vector(idx));
    }
    if (op == "outer") return kiln::outer(t(0), t(0));
    if (op == "argmax_flat") return kiln::argmax(t(0));
    if (op == "slice") return t(0).slice(std::stoi(a.at(1)), std::stoi(a.at(2)), std::stoi(a.at(3)), std::stoi(a.at(4)));
    if (op == "broadcast_to") return t(0).broadcast_to(dims_list(a.at(1)));
    if (op == "cast") return t(0).to(dtype_named(a.at(1)));
    // op <dst> concat <axis> <names...>
    if (op == "concat") return kiln::concat(tensors_from(1), std::stoi(a.at(0)));
    if (op == "stack") return kiln::stack(tensors_from(1), std::stoi(a.at(0)));
    throw std::runtime_error("numpy_runner: unknown op " + op);
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
