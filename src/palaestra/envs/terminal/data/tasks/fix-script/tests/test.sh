#!/bin/sh
set -e
[ "$(sh greet.sh Alice)" = "Hello, Alice!" ]
[ "$(sh greet.sh Bob)" = "Hello, Bob!" ]
