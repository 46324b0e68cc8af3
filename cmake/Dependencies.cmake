# Third-party dependencies, all from Debian packages (see .ci/run for the apt-get line).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(CLI11 CONFIG REQUIRED)          # libcli11-dev
find_package(nlohmann_json CONFIG REQUIRED)  # nlohmann-json3-dev
find_package(doctest CONFIG REQUIRED)        # doctest-dev
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)          # libzstd-dev
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)      # libxxhash-dev
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)      # libpcre2-dev
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)  # libutf8proc-dev
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)  # libsentencepiece-dev
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)  # libcpp-httplib-dev (tprun serve)
# Optional: gloo (libgloo-dev) for the CPU backend with one process per rank (runtime/cpu/gloo_comm.h).
find_package(Gloo CONFIG QUIET)
if(TARGET gloo)
  message(STATUS "gloo found: the CPU backend can run one process per rank")
else()
  message(STATUS "gloo not found (apt-get install libgloo-dev): the CPU backend runs its ranks as threads only")
endif()
