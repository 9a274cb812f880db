# Compiles SOURCE, which must fail, with a diagnostic matching the regex on its first line ("// expect: ...").
# An optional second line "// errors: N" also requires exactly N errors: a mistake must not bring follow-up errors.
file(STRINGS "${SOURCE}" head LIMIT_COUNT 2)
list(GET head 0 first)
string(REGEX REPLACE "^// expect: " "" expected "${first}")
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
# PCH: a clang precompiled header of the source's first include, read with -include-pch. clang 14 crashes reading
# some of graph mode's lambda types from one (a segmentation fault in LambdaExpr::children): the case then runs again
# without it, so a compiler crash never decides a case.
set(pch_flags)
if(PCH)
  set(pch_flags -include-pch "${PCH}")
endif()
execute_process(COMMAND "${COMPILER}" ${flags} ${pch_flags} -fsyntax-only "${SOURCE}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(PCH AND "${err}" MATCHES "PLEASE submit a bug report")
  message(STATUS "${SOURCE}: the compiler crashed reading ${PCH}; compiling it without")
  execute_process(COMMAND "${COMPILER}" ${flags} -fsyntax-only "${SOURCE}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not.")
endif()
if(NOT "${out}${err}" MATCHES "${expected}")
  message(FATAL_ERROR "${SOURCE} failed to compile without the expected diagnostic '${expected}':\n${err}")
endif()
list(LENGTH head lines)
if(lines GREATER 1)
  list(GET head 1 second)
  if("${second}" MATCHES "^// errors: ([0-9]+)")
    set(want ${CMAKE_MATCH_1})
    string(REGEX MATCHALL "error: " found "${out}${err}")
    list(LENGTH found count)
    if(NOT count EQUAL want)
      message(FATAL_ERROR "${SOURCE} gave ${count} errors where ${want} were expected:\n${err}")
    endif()
  endif()
endif()
message(STATUS "${SOURCE}: rejected with '${expected}'")
