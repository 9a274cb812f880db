# Compiles SOURCE, which must fail, with a diagnostic matching the regex on its first line ("// expect: ...").
file(STRINGS "${SOURCE}" first LIMIT_COUNT 1)
string(REGEX REPLACE "^// expect: " "" expected "${first}")
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
execute_process(COMMAND "${COMPILER}" ${flags} -fsyntax-only "${SOURCE}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not.")
endif()
if(NOT "${out}${err}" MATCHES "${expected}")
  message(FATAL_ERROR "${SOURCE} failed to compile without the expected diagnostic '${expected}':\n${err}")
endif()
message(STATUS "${SOURCE}: rejected with '${expected}'")
