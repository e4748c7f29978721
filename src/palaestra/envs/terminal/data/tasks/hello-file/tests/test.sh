#!/bin/sh
set -e
[ "$(cat hello.txt)" = "Hello, world!" ]
