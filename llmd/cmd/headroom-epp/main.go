// Command headroom-epp is llm-d's endpoint picker with Headroom's plugins
// registered beside llm-d's own (package plugins): the runner, its flags
// and its configuration are llm-d's. docs/COMPATIBILITY.md says how to
// build it against another version of the router.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/llm-d/llm-d-router/cmd/epp/runner"

	"github.com/headroomhq/headroom/llmd/plugins"
)

func main() {
	plugins.Register()
	ctx := ctrl.SetupSignalHandler()
	if err := runner.NewRunner().WithExecutableName("headroom-epp").Run(ctx); err != nil {
		os.Exit(1)
	}
}
