#!/bin/sh
set -e
for n in intro usage faq; do [ -f "docs/$n.md" ] && [ ! -e "docs/$n.txt" ] || exit 1; done
[ "$(cat docs/usage.md)" = "usage" ] && [ -f docs/keep.rst ]
