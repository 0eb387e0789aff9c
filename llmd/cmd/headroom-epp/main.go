// Command headroom-epp is llm-d's endpoint picker with Headroom's plugins
// registered beside llm-d's own (package plugins): the runner, its flags
// and its configuration are llm-d's. docs/COMPATIBILITY.md says how to
// build it against another version of the router. Its collector settings
// are package eppgc's: a higher GOGC within the container's memory limit,
// unless GOGC or GOMEMLIMIT say otherwise.
package main

import (
	"log/slog"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/llm-d/llm-d-router/cmd/epp/runner"

	"github.com/headroomhq/headroom/llmd/eppgc"
	"github.com/headroomhq/headroom/llmd/plugins"
)

func main() {
	gc := eppgc.Choose(os.LookupEnv, eppgc.ContainerMemoryLimit(os.DirFS("/")))
	gc.Apply()
	slog.Info("headroom-epp: garbage collection", "settings", gc.String())
	plugins.Register()
	ctx := ctrl.SetupSignalHandler()
	if err := runner.NewRunner().WithExecutableName("headroom-epp").Run(ctx); err != nil {
		os.Exit(1)
	}
}
