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
