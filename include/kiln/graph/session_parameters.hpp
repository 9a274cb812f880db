// kiln::session's parameter store (graph/session.hpp): its parameters by name, the names and dtypes of the
// parameters of every expression it has seen, its generator and its device. A session is one of these plus its
// plans' workspaces and training steps' state (graph/session.hpp) and their update (graph/session_update.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "../core/names.hpp"
#include "../eager/convert.hpp"
#include "../eager/init.hpp"
#include "../eager/random.hpp"
#include "../eager/tensor.hpp"
#include "training_step.hpp"

namespace kiln {
namespace detail {

class session_parameters {
public:
    // Parameters made on the CPU from the seed (the same values whatever the device) and kept on `where`.
    explicit session_parameters(std::uint64_t seed, kiln::device where = kiln::cpu) : gen_(seed), dev_(where) {
        if (where.type != device_type::cpu) (void)tensor(float32, dims{0}, where);  // a device_error when it does not exist
    }
    // The device the session's parameters and runs live on.
    kiln::device device() const noexcept { return dev_; }

    // A parameter's tensor (created from its initializer by the first run that uses it, or by set()).
    tensor& parameter(std::string_view name) {
        auto it = params_.find(name);
        if (it == params_.end()) throw_unknown_parameter("kiln::session::parameter", name);
        return it->second;
    }
    const tensor& parameter(std::string_view name) const {
        auto it = params_.find(name);
        if (it == params_.end()) throw_unknown_parameter("kiln::session::parameter", name);
        return it->second;
    }
    bool has_parameter(std::string_view name) const { return params_.find(name) != params_.end(); }
    std::vector<std::string> parameter_names() const {
        std::vector<std::string> out;
        for (const auto& kv : params_) out.push_back(kv.first);
        return out;
    }
    // Sets a parameter's value (copied). The name must be a parameter the session knows: one it holds, or one of
    // an expression it has run or initialized (session::initialize(expr), or declare(expr) to learn the names
    // without creating anything). A name it does not know is a kiln::value_error naming the closest known ones,
    // so a typo cannot create a parameter that nothing uses. The shape may change only before a plan has used the
    // parameter; the dtype must be the declared one.
    void set(std::string_view name, const tensor& value) {
        auto it = params_.find(name);
        if (it == params_.end()) {
            const auto d = declared_.find(name);
            if (d == declared_.end()) throw_unknown_parameter("kiln::session::set", name);
            if (d->second.dt != value.dtype())
                throw dtype_error("kiln: dtype_error in 'session::set': parameter '" + std::string(name) + "' is declared " +
                                  std::string(kiln::name(d->second.dt)) + " but the value's dtype is " +
                                  std::string(kiln::name(value.dtype())) + " (convert it with .to())");
            d->second.check_shape(value.shape(), "session::set");  // its static shape, where it has one
            params_.emplace(std::string(name), copy_of(value));
            return;
        }
        if (!(it->second.shape() == value.shape()) || it->second.dtype() != value.dtype())
            throw shape_error("kiln: shape_error in 'session::set': parameter '" + std::string(name) + "' has shape " +
                              to_string(it->second.shape()) + " and dtype " + std::string(kiln::name(it->second.dtype())) +
                              ", the new value " + to_string(value.shape()) + " and " + std::string(kiln::name(value.dtype())));
        detail::eager_copy(it->second, value);
    }
    // The same with the parameter itself (kiln::param<"w", ...>): its name cannot be misspelled, so it needs no
    // earlier declaration.
    template <fixed_string Name, class T, class S, class Kind>
        requires is_param_v<detail::leaf<Name, T, S, Kind>>
    void set(const detail::leaf<Name, T, S, Kind>& p, const tensor& value) {
        declare_leaves<detail::types<detail::leaf<Name, T, S, Kind>>>();
        set(p.name.view(), value);
    }
    // Creates every parameter of an expression that does not exist yet, from its initializer (a parameter without
    // a static shape is only declared: set it with set()).
    template <class E>
    void initialize(const E&) {
        using leaves = detail::leaves_t<detail::unique_nodes_t<E>>;
        declare_leaves<leaves>();
        [&]<class... L>(detail::types<L...>) {
            ((is_param_v<L> ? (void)initialize_one<L>() : void()), ...);
        }(leaves{});
    }
    // Learns the names and dtypes of an expression's (or a training step's loss's) parameters, creating nothing.
    template <class E>
    void declare(const E&) {
        declare_leaves<detail::leaves_t<detail::unique_nodes_t<E>>>();
    }
    // The names the session knows: the parameters it holds and those of the expressions it has seen.
    std::vector<std::string> known_parameter_names() const {
        std::vector<std::string> out;
        for (const auto& kv : declared_) out.push_back(kv.first);
        for (const auto& kv : params_)
            if (!declared_.count(kv.first)) out.push_back(kv.first);
        return out;
    }
    generator& rng() noexcept { return gen_; }

protected:
    template <class L>
    void initialize_one() {
        if constexpr (detail::fully_static_v<typename L::shape_type>) (void)parameter_for<L>();
    }

    template <class LeafList>
    void declare_leaves() {
        [&]<class... L>(detail::types<L...>) {
            ((is_param_v<L> ? (void)declared_.emplace(std::string(L::name.view()),
                                                      declared_param{dtype_of<typename L::value_type>(),
                                                                     &detail::check_static_shape<L>})
                            : void()),
             ...);
        }(LeafList{});
    }

    [[noreturn]] void throw_unknown_parameter(const char* where, std::string_view name) const {
        std::vector<std::string> known = known_parameter_names();
        std::string msg = detail::error_prefix("value_error", where) + "no parameter named '" + std::string(name) + "'";
        if (known.empty()) {
            msg += "; the session has seen no expression with parameters yet (run one, or call "
                   "session::initialize(expr) or session::declare(expr) first, or pass the kiln::param itself)";
        } else {
            msg += "; closest known: " + detail::closest_text(name, std::move(known));
        }
        throw value_error(msg);
    }

    tensor copy_of(const tensor& src) const {
        tensor t = dev_.type == device_type::cpu ? tensor(src.dtype(), src.shape()) : tensor(src.dtype(), src.shape(), dev_);
        detail::eager_copy(t, src);
        return t;
    }

    template <class L>
    tensor& parameter_for() {
        const std::string_view name = L::name.view();
        auto it = params_.find(name);
        using T = typename L::value_type;
        if (it != params_.end()) {
            if (it->second.dtype() != dtype_of<T>())
                throw dtype_error("kiln: dtype_error in 'session': parameter '" + std::string(name) + "' is declared " +
                                  std::string(dtype_name<T>()) + " but holds " + std::string(kiln::name(it->second.dtype())));
            return it->second;
        }
        using S = typename L::shape_type;
        if constexpr (!detail::fully_static_v<S>) {
            throw value_error("kiln: value_error in 'session': parameter '" + std::string(name) +
                              "' has no static shape to initialize from; declare one (kiln::param<\"w\", float, "
                              "kiln::shape<10, 64>>) or set it with session::set");
        } else {
            using Init = typename L::kind::initializer;
            tensor t = Init::make(detail::shape_dims_of<S>::get(), dtype_of<T>(), gen_);
            t = detail::session_on_device(t, dev_);  // the CPU's numbers, on the session's device
            return params_.emplace(std::string(name), std::move(t)).first->second;
        }
    }

    generator gen_;
    kiln::device dev_ = kiln::cpu;
    std::map<std::string, tensor, std::less<>> params_;
    struct declared_param {
        dtype dt;
        void (*check_shape)(const dims&, const char*);  // a shape_error unless the shape fits the static one
    };
    std::map<std::string, declared_param, std::less<>> declared_;  // parameters of the expressions seen, with their dtypes
};

}  // namespace detail
}  // namespace kiln
