#!/bin/sh
set -e
[ "$(cat payload.sha256)" = "10fc3c51a152e90e5b90319b601d92ccf37290ef53c35ff92507687d8a911a08  payload.bin" ]
