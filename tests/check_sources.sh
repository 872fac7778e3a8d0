#!/bin/sh
# tests/check_sources.sh — house rules a compiler does not check, over every
# C file of the project (core/, api/, server/, tests/):
#   1. none of sprintf, strcpy, strcat, strtok, atoi, gets is called
#      (snprintf, memcpy with a checked length, strtol instead);
#   2. a layer includes no project header of a layer above it (core/ none of
#      api/ or server/, api/ none of server/). The system headers of the
#      layers above are kept out by the build itself (Makefile, "Layers");
#   3. server/ includes of core/ are only the headers of the objects the
#      process makes and hands to api/ (docs/architecture.md): the store,
#      its journal settings, workspaces, stops and the kernel choice.
# Prints each offending line and ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
passed=0; failed=0
files=$(find core api server tests -name node_modules -prune -o \
        \( -name '*.c' -o -name '*.h' \) -type f -print | sort)

check() {   # check NAME FILES... (the pattern is in $pat)
    name=$1; shift
    hits=$(grep -nE "$pat" "$@" /dev/null)
    if [ -n "$hits" ]; then
        echo "FAIL $name:"; echo "$hits" | sed 's/^/  /'
        failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
}

pat='(^|[^A-Za-z0-9_])(sprintf|strcpy|strcat|strtok|atoi|gets)[[:space:]]*\('
# shellcheck disable=SC2086
check "banned functions" $files
pat='^[[:space:]]*#[[:space:]]*include[[:space:]]*"(api|server)/'
# shellcheck disable=SC2086
check "core includes api/ or server/" $(echo "$files" | grep '^core/')
pat='^[[:space:]]*#[[:space:]]*include[[:space:]]*"server/'
# shellcheck disable=SC2086
check "api includes server/" $(echo "$files" | grep '^api/')

srv_core=$(echo "$files" | grep '^server/' | xargs grep -lE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"core/' 2>/dev/null)
pat='^[[:space:]]*#[[:space:]]*include[[:space:]]*"core/([^"]*)"'
if [ -n "$srv_core" ]; then
    # shellcheck disable=SC2086
    hits=$(grep -nE "$pat" $srv_core /dev/null |
           grep -vE '"core/(attn|attn_fused|journal|stop|store)\.h"')
    if [ -n "$hits" ]; then
        echo "FAIL server includes a core/ header beyond the process's objects:"
        echo "$hits" | sed 's/^/  /'
        failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
