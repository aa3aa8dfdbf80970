# Apply LMP_SANITIZERS (e.g. "address;undefined") to every target built after this point.
if(LMP_SANITIZERS)
  if("thread" IN_LIST LMP_SANITIZERS AND "address" IN_LIST LMP_SANITIZERS)
    message(FATAL_ERROR "ThreadSanitizer cannot be combined with AddressSanitizer")
  endif()
  list(JOIN LMP_SANITIZERS "," _lmp_san)
  add_compile_options(-fsanitize=${_lmp_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_lmp_san})
  # GCC 12's flow analysis under the sanitizers' instrumentation reports
  # maybe-uninitialized in libstdc++'s <regex> (pulled in by Catch2): false positives
  # that would fail a -Werror build. Plain builds keep the warning.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
endif()
