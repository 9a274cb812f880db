#pragma once
// Checkpoints: variables and optimizer state saved to a file and restored, so that training resumes bit for bit
// (5 epochs equal 3 epochs, a save, a load in a fresh process and 2 more). One format for every mode:
//
//   eager and function mode                        graph mode (kiln::session)
//   kiln::save_checkpoint(path, params, opt);      kiln::save_checkpoint(path, session);
//   kiln::load_checkpoint(path, params, opt);      kiln::load_checkpoint(path, session);
//   kiln::save_checkpoint(path, model, opt);       (a module: its parameters and its buffers)
//
// The file is a safetensors file (kiln/io/safetensors.hpp), so other tools can read the weights:
// - parameters as "param/<i>" (by position in `params`), or by a session's parameter names; a module's buffers
//   (nn::module::buffers(): batch_norm_layer's running statistics) as "buffer/<i>";
// - the optimizer's state as "optimizer/<name>" (Adam: "optimizer/m/<i>", "optimizer/v/<i>", "optimizer/step");
// - metadata: "kiln.checkpoint" (the format's version, "1"), "optimizer" (its kind: "adam", "sgd", or "none") and
//   "optimizer.hyperparameters" (for people: hyperparameters come from the code that loads, as in TensorFlow).
//
// Loading checks everything before it changes anything: the file's kind and version, the optimizer's kind, that
// every tensor the model and optimizer have is in the file with the same dtype and shape, and that the file holds
// nothing else. Each mismatch is a kiln::file_error naming the file and the tensor. Values are written into the
// variables' and slots' storage (never rebinding them), so traced functions that read them stay valid.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../graph/session.hpp"
#include "../nn/layers.hpp"
#include "../nn/optim.hpp"
#include "safetensors.hpp"

namespace kiln {

namespace detail {

inline constexpr const char* checkpoint_version = "1";

using named_variables = std::vector<std::pair<std::string, variable*>>;

inline named_variables by_position(const std::vector<variable*>& params, const std::vector<variable*>& buffers = {}) {
    named_variables out;
    for (std::size_t i = 0; i < params.size(); ++i) out.emplace_back("param/" + std::to_string(i), params[i]);
    for (std::size_t i = 0; i < buffers.size(); ++i) out.emplace_back("buffer/" + std::to_string(i), buffers[i]);
    return out;
}

inline void check_variables(const named_variables& vars, const char* entry) {
    for (const auto& [name, v] : vars) {
        if (!v) throw value_error("kiln: value_error in '" + std::string(entry) + "': parameter '" + name + "' is a null pointer");
        v->check_valid(entry);
    }
}

// A tensor of the file that must match `want` (dtype and shape).
inline const tensor& checkpoint_entry(const tensor_file& f, const std::string& key, const tensor& want, const char* entry) {
    const std::string& name = key;
    const auto it = f.tensors.find(key);
    if (it == f.tensors.end())
        throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + f.source + "' has no tensor '" + name +
                         "'" + (f.tensors.empty() ? std::string() : "; closest: " + closest_text(name, f.names())));
    const tensor& t = it->second;
    if (t.dtype() != want.dtype() || !(t.shape() == want.shape()))
        throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + f.source + "': tensor '" + name + "' is " +
                         to_string(t.shape()) + " " + std::string(kiln::name(t.dtype())) + ", but the model's is " +
                         to_string(want.shape()) + " " + std::string(kiln::name(want.dtype())));
    return t;
}

inline void check_header(const tensor_file& f, std::string_view optimizer, const char* entry) {
    const auto version = f.metadata.find("kiln.checkpoint");
    if (version == f.metadata.end())
        throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + f.source +
                         "' is not a kiln checkpoint (its metadata has no 'kiln.checkpoint'; load_safetensors reads it)");
    if (version->second != checkpoint_version)
        throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + f.source + "' is a checkpoint of version '" +
                         json::reader::printable(version->second) + "'; this kiln reads version " + checkpoint_version);
    const auto opt = f.metadata.find("optimizer");
    const std::string has = opt == f.metadata.end() ? "none" : opt->second;
    if (has != optimizer)
        throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + f.source + "' holds the state of optimizer '" +
                         json::reader::printable(has) + "', but it is loaded into '" + std::string(optimizer) + "'");
}

inline void check_nothing_else(const tensor_file& f, const std::map<std::string, const tensor*>& expected, const char* entry) {
    for (const auto& [name, t] : f.tensors)
        if (!expected.count(name))
            throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + f.source + "' holds tensor '" +
                             json::reader::printable(name) + "', which the model and optimizer being loaded do not have (" +
                             std::to_string(f.tensors.size()) + " tensors in the file, " + std::to_string(expected.size()) +
                             " expected)");
}

template <class Optimizer>
void save_eager(const std::string& path, const named_variables& vars, const Optimizer* opt, const char* entry) {
    check_variables(vars, entry);
    std::map<std::string, tensor> out;
    for (const auto& [name, v] : vars)
        if (!out.emplace(name, v->to(kiln::cpu)).second)  // (a GPU tensor's values, copied to the host)
            throw value_error("kiln: value_error in '" + std::string(entry) + "': two parameters are named '" + name + "'");
    std::map<std::string, std::string> meta{{"kiln.checkpoint", checkpoint_version}, {"optimizer", "none"}};
    if (opt) {
        for (auto& [name, t] : opt->state()) out.emplace("optimizer/" + name, t.to(kiln::cpu));
        meta["optimizer"] = std::string(Optimizer::kind());
        meta["optimizer.hyperparameters"] = opt->hyperparameters();
    }
    save_safetensors_as(path, out, meta, entry);
}

// (`trained`: how many of vars, from the first, are the optimizer's parameters; the rest are buffers.)
template <class Optimizer>
void load_eager(const std::string& path, const named_variables& vars, Optimizer* opt, const char* entry,
                std::size_t trained = static_cast<std::size_t>(-1)) {
    check_variables(vars, entry);
    const tensor_file f = load_safetensors_as(path, entry);
    check_header(f, opt ? Optimizer::kind() : std::string_view("none"), entry);
    std::map<std::string, const tensor*> expected;
    std::vector<std::pair<tensor*, const tensor*>> copies;
    for (const auto& [name, v] : vars) {
        copies.emplace_back(v, &checkpoint_entry(f, name, *v, entry));
        expected.emplace(name, v);
    }
    std::map<std::string, tensor> slots;
    if (opt) {
        std::vector<variable*> params;
        for (std::size_t i = 0; i < vars.size() && i < trained; ++i) params.push_back(vars[i].second);
        opt->bind(params);
        for (const auto& [name, t] : opt->state()) {
            const std::string key = "optimizer/" + name;
            slots.emplace(name, checkpoint_entry(f, key, t, entry).to(t.device()));
            expected.emplace(key, &t);
        }
    }
    check_nothing_else(f, expected, entry);
    // Every check passed: write.
    for (auto& [dst, src] : copies) dst->copy_(src->to(dst->device()));  // (onto a GPU parameter's device)
    if (opt) opt->restore(slots);
}

struct no_optimizer {
    static constexpr std::string_view kind() { return "none"; }
    std::string hyperparameters() const { return {}; }
    std::map<std::string, tensor> state() const { return {}; }
    void bind(const std::vector<variable*>&) {}
    void restore(const std::map<std::string, tensor>&) {}
};

}  // namespace detail

// Eager and function mode: parameters (named "param/<i>" by position) and an optimizer's state.
template <class Optimizer>
void save_checkpoint(const std::string& path, const std::vector<variable*>& params, const Optimizer& opt) {
    detail::save_eager(path, detail::by_position(params), &opt, "save_checkpoint");
}
inline void save_checkpoint(const std::string& path, const std::vector<variable*>& params) {
    detail::save_eager<detail::no_optimizer>(path, detail::by_position(params), nullptr, "save_checkpoint");
}

template <class Optimizer>
void load_checkpoint(const std::string& path, const std::vector<variable*>& params, Optimizer& opt) {
    detail::load_eager(path, detail::by_position(params), &opt, "load_checkpoint");
}
inline void load_checkpoint(const std::string& path, const std::vector<variable*>& params) {
    detail::load_eager<detail::no_optimizer>(path, detail::by_position(params), nullptr, "load_checkpoint");
}

// A module's parameters ("param/<i>") and buffers ("buffer/<i>": batch_norm_layer's running statistics), with an
// optimizer's state or without.
template <class Optimizer>
void save_checkpoint(const std::string& path, nn::module& model, const Optimizer& opt) {
    detail::save_eager(path, detail::by_position(model.parameters(), model.buffers()), &opt, "save_checkpoint");
}
inline void save_checkpoint(const std::string& path, nn::module& model) {
    detail::save_eager<detail::no_optimizer>(path, detail::by_position(model.parameters(), model.buffers()), nullptr,
                                             "save_checkpoint");
}
template <class Optimizer>
void load_checkpoint(const std::string& path, nn::module& model, Optimizer& opt) {
    const std::vector<variable*> params = model.parameters();
    detail::load_eager(path, detail::by_position(params, model.buffers()), &opt, "load_checkpoint", params.size());
}
inline void load_checkpoint(const std::string& path, nn::module& model) {
    detail::load_eager<detail::no_optimizer>(path, detail::by_position(model.parameters(), model.buffers()), nullptr,
                                             "load_checkpoint");
}

// Graph mode: a session's parameters (by their names) and the optimizer state of its training step (its slots
// and step count; a session that has taken steps of more than one training step cannot be saved in one file).
inline void save_checkpoint(const std::string& path, const session& s) {
    std::map<std::string, tensor> out;
    for (const std::string& name : s.parameter_names()) out.emplace(name, s.parameter(name).to(kiln::cpu));
    std::string optimizer = "none";
    s.save_training_state(out, optimizer, "save_checkpoint");
    detail::save_safetensors_as(path, out, {{"kiln.checkpoint", detail::checkpoint_version}, {"optimizer", optimizer}},
                        "save_checkpoint");
}

// Restores a session's parameters (every one the file names; a parameter the session has not made yet is made
// with the file's value) and its training step's state: applied now if the step has run, or when it first runs.
inline void load_checkpoint(const std::string& path, session& s) {
    const char* entry = "load_checkpoint";
    const tensor_file f = detail::load_safetensors_as(path, entry);
    const auto version = f.metadata.find("kiln.checkpoint");
    if (version == f.metadata.end() || version->second != detail::checkpoint_version)
        detail::check_header(f, "", entry);  // throws the message
    std::map<std::string, tensor> params, training;
    for (const auto& [name, t] : f.tensors) {
        if (name.rfind("optimizer/", 0) == 0) training.emplace(name, t);
        else params.emplace(name, t);
    }
    const std::vector<std::string> known = s.known_parameter_names();
    for (const auto& [name, t] : params) {
        if (s.has_parameter(name)) {
            (void)detail::checkpoint_entry(f, name, s.parameter(name), entry);
        } else if (std::find(known.begin(), known.end(), name) == known.end()) {
            throw file_error("kiln: file_error in 'load_checkpoint': '" + f.source + "' holds parameter '" +
                             json::reader::printable(name) + "', which the session does not know" +
                             (known.empty() ? std::string("; declare the model first (session::declare(loss) or "
                                                          "session::initialize(loss))")
                                            : "; closest known: " + detail::closest_text(name, known)));
        }
    }
    const auto opt = f.metadata.find("optimizer");
    s.load_training_state(training, opt == f.metadata.end() ? "none" : opt->second, f.source, entry);
    for (const auto& [name, t] : params) s.set(name, t);
}

}  // namespace kiln
