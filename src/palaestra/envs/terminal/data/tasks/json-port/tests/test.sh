#!/bin/sh
set -e
[ "$(tr -d ' \n' < port.txt)" = "8443" ]
