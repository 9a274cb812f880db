#pragma once
// kiln::to_string (infix text) and kiln::to_dot (a Graphviz picture of the unique nodes: shared subexpressions
// appear once, with one edge to each user).
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../expr/unique_nodes.hpp"

namespace kiln {
namespace detail {

template <class C>
std::string constant_text() {
    if constexpr (C::den == 1) return std::to_string(C::num);
    else {
        // Exact decimals when the denominator allows (1/2 -> 0.5), a fraction otherwise (1/3).
        std::int64_t d = C::den;
        while (d % 2 == 0) d /= 2;
        while (d % 5 == 0) d /= 5;
        if (d != 1) return std::to_string(C::num) + "/" + std::to_string(C::den);
        return detail::number_text(static_cast<double>(C::num) / static_cast<double>(C::den));
    }
}

template <class T>
std::string scalar_text(T v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
    return buf;
}

template <class Op>
std::string op_label() {
    if constexpr (requires { typename Op::target; }) return "cast<" + std::string(dtype_name<typename Op::target>()) + ">";
    else return std::string(Op::name);
}

template <class E>
constexpr int precedence() {
    if constexpr (is_node_v<E>) {
        if constexpr (requires { E::op::precedence; }) return E::op::precedence;
        else return 10;  // function calls bind tightest
    } else {
        return 10;
    }
}

template <class E>
std::string text(const E& e) {
    if constexpr (is_leaf_v<E>) {
        if constexpr (requires { E::name.view(); }) return std::string(E::name.view());
        else if constexpr (requires { E::slot; }) return "$" + std::to_string(E::slot);  // a planner's slot
        else return "?";
    } else if constexpr (is_constant_v<E>) {
        return constant_text<E>();
    } else if constexpr (is_scalar_node<E>::value) {
        return scalar_text(e.value);
    } else {
        using op = typename E::op;
        constexpr int p = precedence<E>();
        auto child = [&]<std::size_t J>(std::integral_constant<std::size_t, J>, bool right) {
            using A = std::remove_cvref_t<decltype(e.template arg<J>())>;
            std::string s = text(e.template arg<J>());
            const int q = precedence<A>();
            const bool paren = q < p || (right && q == p && (op::name == "sub" || op::name == "div"));
            return paren ? "(" + s + ")" : s;
        };
        if constexpr (requires { op::symbol; } && E::arity == 2) {
            return child(std::integral_constant<std::size_t, 0>{}, false) + " " + std::string(op::symbol) + " " +
                   child(std::integral_constant<std::size_t, 1>{}, true);
        } else if constexpr (requires { op::symbol; } && E::arity == 1) {
            return std::string(op::symbol) + child(std::integral_constant<std::size_t, 0>{}, false);
        } else {
            std::string s = op_label<op>() + "(";
            [&]<std::size_t... J>(std::index_sequence<J...>) {
                ((s += (J ? ", " : "") + text(e.template arg<J>())), ...);
            }(std::make_index_sequence<E::arity>{});
            return s + ")";
        }
    }
}

template <class List>
struct dot_writer {
    std::string body;
    std::vector<bool> emitted = std::vector<bool>(List::size, false);
    std::size_t fresh = List::size;

    static std::string escape(std::string s) {
        std::string out;
        for (char ch : s) {
            if (ch == '"' || ch == '\\') out += '\\';
            out += ch;
        }
        return out;
    }

    template <class E>
    std::size_t visit(const E& e) {
        std::size_t id;
        if constexpr (contains<E, List>::value) {
            id = index_of<E, List>::value;
            if (emitted[id]) return id;
            emitted[id] = true;
        } else {
            id = fresh++;
        }
        const std::string n = "n" + std::to_string(id);
        if constexpr (is_leaf_v<E>) {
            const char* kind = std::is_base_of_v<param_kind, typename E::kind> ? "param" : "input";
            body += "  " + n + " [label=\"" + escape(std::string(E::name.view())) + "\\n" + kind + " " +
                    std::string(dtype_name<typename E::value_type>()) + "\", shape=ellipse];\n";
        } else if constexpr (is_constant_v<E> || is_scalar_node<E>::value) {
            body += "  " + n + " [label=\"" + text(e) + "\", shape=plaintext];\n";
        } else {
            body += "  " + n + " [label=\"" + op_label<typename E::op>() + "\"];\n";
            [&]<std::size_t... J>(std::index_sequence<J...>) {
                ((body += "  n" + std::to_string(visit(e.template arg<J>())) + " -> " + n + ";\n"), ...);
            }(std::make_index_sequence<E::arity>{});
        }
        return id;
    }
};

template <class... Roots>
struct fetch_t;

template <class... Es, class Get>
std::string roots_text(Get get) {
    static_assert(sizeof...(Es) > 0, "kiln::to_string: the tuple holds no expression.");
    static_assert((is_graph_v<Es> && ...), "kiln::to_string: every element must be a graph-mode expression.");
    std::string out = "(";
    [&]<std::size_t... J>(std::index_sequence<J...>) {
        ((out += (J == 0 ? "" : ", ") + text(get(std::integral_constant<std::size_t, J>{}))), ...);
    }(std::index_sequence_for<Es...>{});
    return out + ")";
}

template <class... Es, class Get>
std::string roots_dot(Get get) {
    static_assert(sizeof...(Es) > 0, "kiln::to_dot: the tuple holds no expression.");
    static_assert((is_graph_v<Es> && ...), "kiln::to_dot: every element must be a graph-mode expression.");
    dot_writer<unique_nodes_t<Es...>> w;
    [&]<std::size_t... J>(std::index_sequence<J...>) {
        ((w.body += "  r" + std::to_string(J) + " [label=\"root " + std::to_string(J) +
                    "\", shape=plaintext];\n  n" + std::to_string(w.visit(get(std::integral_constant<std::size_t, J>{}))) +
                    " -> r" + std::to_string(J) + ";\n"),
         ...);
    }(std::index_sequence_for<Es...>{});
    return w.body;
}

inline std::string dot_document(const std::string& body) {
    return "digraph kiln {\n  rankdir=BT;\n  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n" + body + "}\n";
}

}  // namespace detail

// The expression as infix text: "relu(x * y + 0.5 * x - y) * 2 + y".
template <class E>
std::string to_string(const E& expr) {
    static_assert(is_graph_v<E>, "kiln::to_string: the argument must be a graph-mode expression.");
    return detail::text(expr);
}

// The expression as a Graphviz digraph; each unique node appears once.
template <class E>
std::string to_dot(const E& expr) {
    static_assert(is_graph_v<E>, "kiln::to_dot: the argument must be a graph-mode expression.");
    detail::dot_writer<detail::unique_nodes_t<E>> w;
    w.visit(expr);
    return detail::dot_document(w.body);
}

// Several roots: a std::tuple of expressions (a training step's gradients()) or a kiln::fetch(...). The text is
// "(a, b)"; the picture draws every root's graph once, shared nodes once, each root marked "root i".
template <class... Es>
std::string to_string(const std::tuple<Es...>& roots) {
    return detail::roots_text<Es...>([&](auto j) -> decltype(auto) { return std::get<j()>(roots); });
}
template <class... Es>
std::string to_dot(const std::tuple<Es...>& roots) {
    return detail::dot_document(
        detail::roots_dot<Es...>([&](auto j) -> decltype(auto) { return std::get<j()>(roots); }));
}
template <class... Es>
std::string to_string(const detail::fetch_t<Es...>& f) {
    return detail::roots_text<Es...>([&](auto j) -> decltype(auto) { return f.roots.template get<j()>(); });
}
template <class... Es>
std::string to_dot(const detail::fetch_t<Es...>& f) {
    return detail::dot_document(
        detail::roots_dot<Es...>([&](auto j) -> decltype(auto) { return f.roots.template get<j()>(); }));
}

}  // namespace kiln
