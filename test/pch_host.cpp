// The unit that precompiles <kiln/kiln.hpp> for a set of test units with the same flags (kiln_test_pch in
// ../CMakeLists.txt): the header comes in by the precompiled-header include, this file adds nothing.
