// expect: kiln: an eager kiln::tensor cannot be an operand of a graph-mode expression: feed it to an input
// errors: 1
// A kiln::tensor mixed into a graph-mode expression: one sentence that says what to do (it was 86 lines and 7
// errors about internal static_casts).
#include <kiln/kiln.hpp>
using namespace kiln::literals;
int main() {
    const kiln::tensor t = kiln::ones({3});
    const auto e = "x"_in * t;
    (void)e;
}
