// expect: kiln::function: the wrapped function cannot be called with these arguments
// errors: 1
// A traced function called with one argument where it takes two: one sentence, no errors from inside the tracer.
#include <kiln/function.hpp>
int main() {
    auto f = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) { return a + b; });
    kiln::tensor r = f(kiln::ones({2}));
    (void)r;
}
