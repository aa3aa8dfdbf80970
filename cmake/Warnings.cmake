# lmp_warnings: an INTERFACE target carrying the project's warning set.
# -Werror is added only when LMP_WARNINGS_AS_ERRORS is ON (CI turns it on).
add_library(lmp_warnings INTERFACE)
target_compile_options(lmp_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Wunused -Woverloaded-virtual -Wdouble-promotion
  -Wformat=2 -Wimplicit-fallthrough
  # g++ 12 reports false -Wrestrict overlaps in std::string concatenation (GCC bug 105329)
  $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
  $<$<BOOL:${LMP_WARNINGS_AS_ERRORS}>:-Werror>)
