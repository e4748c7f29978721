#!/bin/sh
set -e
[ "$(tr -d ' \n' < top.txt)" = "the" ]
