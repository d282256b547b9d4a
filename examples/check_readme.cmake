# check_readme.cmake - fails when the C program in README.md (the block after
# "<!-- examples/quickstart.c -->") differs from examples/quickstart.c, so the
# README's example is the one the tests build and run.
# usage: cmake -DREADME=README.md -DSOURCE=examples/quickstart.c -P check_readme.cmake
file(READ "${README}" readme)
file(READ "${SOURCE}" source)
set(marker "<!-- examples/quickstart.c -->\n```c\n")
string(FIND "${readme}" "${marker}" at)
if(at LESS 0)
  message(FATAL_ERROR "${README}: no block after '<!-- examples/quickstart.c -->'")
endif()
string(LENGTH "${marker}" len)
math(EXPR at "${at} + ${len}")
string(SUBSTRING "${readme}" ${at} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} block)
if(NOT block STREQUAL source)
  message(FATAL_ERROR "${README}: its example differs from ${SOURCE}; copy the file into the README")
endif()
message(STATUS "README.md's example is ${SOURCE}")
