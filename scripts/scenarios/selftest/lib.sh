# shellcheck shell=bash
# Runner self-test scenarios (tests/integration: scenario_runner_*): the real
# helpers, so the self-tests exercise the same evidence format.
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
