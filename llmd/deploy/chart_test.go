// Package deploy_test renders llm-d's router Helm chart with the values
// deploy/llm-d ships and checks the EPP pod they make: the custom EPP with
// Headroom's config, which llm-d's loader accepts, and Headroom's image in
// the latency-predictor sidecars, whose command lines, run as the pod would
// run them, start a Headroom trainer and predictor.
package deploy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/headroomhq/headroom/llmd/inproc"
	"github.com/headroomhq/headroom/llmd/internal/headroomtest"
)

const (
	charts     = "../../../shared/upstream/llm-d-router/config/charts"
	valuesFile = "../../deploy/llm-d/values-pd-headroom.yaml"
	configFile = "../../deploy/llm-d/pd-headroom-epp-config.yaml"
	configName = "pd-headroom-epp-config.yaml"
)

// render is `helm template default-pool CHART -n llm-d -f values
// --set-file router.epp.pluginsCustomConfig.<config>=<config file> --set
// router.modelServers.matchLabels.app=vllm` with Helm's own library, the
// chart's file://../routerlib dependency loaded from beside it.
func render(t *testing.T, chart string) map[string][]byte {
	t.Helper()
	config, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	return renderWith(t, chart, string(config), nil)
}

// renderWith is render with config in place of the shipped config, and
// set, when not nil, changing the router's values (as --set would).
func renderWith(t *testing.T, chart, config string, set func(router map[string]any)) map[string][]byte {
	t.Helper()
	ch, err := loader.Load(filepath.Join(charts, chart))
	if err != nil {
		t.Fatalf("load chart %s: %v (the llm-d-router tree must be beside the repository)", chart, err)
	}
	lib, err := loader.Load(filepath.Join(charts, "routerlib"))
	if err != nil {
		t.Fatal(err)
	}
	ch.SetDependencies(lib)
	vals, err := chartutil.ReadValuesFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	router := vals["router"].(map[string]any)
	epp := router["epp"].(map[string]any)
	epp["pluginsCustomConfig"] = map[string]any{configName: config}
	router["modelServers"] = map[string]any{"matchLabels": map[string]any{"app": "vllm"}}
	if set != nil {
		set(router)
	}
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		t.Fatal(err)
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "default-pool", Namespace: "llm-d", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		t.Fatalf("render %s: %v", chart, err)
	}
	objects := map[string][]byte{} // kind/name → manifest
	for path, f := range files {
		if !strings.HasSuffix(path, ".yaml") {
			continue // NOTES.txt, which helm prints rather than applies
		}
		for _, doc := range strings.Split(f, "\n---") {
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("rendered %s: %v", doc, err)
			}
			if meta.Kind != "" {
				objects[meta.Kind+"/"+meta.Metadata.Name] = []byte(doc)
			}
		}
	}
	return objects
}

func decode[T any](t *testing.T, objects map[string][]byte, key string) *T {
	t.Helper()
	doc, ok := objects[key]
	if !ok {
		keys := make([]string, 0, len(objects))
		for k := range objects {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Fatalf("no %s among %v", key, keys)
	}
	var v T
	if err := yaml.UnmarshalStrict(doc, &v); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return &v
}

func container(t *testing.T, d *appsv1.Deployment, name string) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s in the EPP pod", name)
	return corev1.Container{}
}

// env is a container's environment as the kubelet gives it: its config
// maps' data, then its own variables (field references left out).
func env(t *testing.T, objects map[string][]byte, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, from := range c.EnvFrom {
		cm := decode[corev1.ConfigMap](t, objects, "ConfigMap/"+from.ConfigMapRef.Name)
		for k, v := range cm.Data {
			out[k] = v
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			out[e.Name] = e.Value
		}
	}
	return out
}

func TestChart(t *testing.T) {
	for _, chart := range []string{"llm-d-router-gateway", "llm-d-router-standalone"} {
		t.Run(chart, func(t *testing.T) {
			objects := render(t, chart)
			d := decode[appsv1.Deployment](t, objects, "Deployment/default-pool-epp")

			// The custom EPP, with the experimental plugins allowed and
			// Headroom's config, which is the shipped file and which llm-d's
			// loader accepts with Headroom's plugins.
			epp := container(t, d, "epp")
			if epp.Image != "localhost:5000/headroom-epp:latest" {
				t.Errorf("EPP image %s", epp.Image)
			}
			args := strings.Join(epp.Args, " ")
			if !strings.Contains(args, "--config-file /config/"+configName) || !strings.Contains(args, "--allow-experimental-plugins=true") {
				t.Errorf("EPP args %s", args)
			}
			// headroom-epp raises GOGC only within a memory limit it knows
			// (package eppgc); the chart gives the EPP container one.
			if lim, ok := epp.Resources.Limits[corev1.ResourceMemory]; !ok || lim.Value() <= 0 {
				t.Errorf("EPP resources %+v: no memory limit, so headroom-epp keeps Go's collector defaults", epp.Resources)
			}
			cm := decode[corev1.ConfigMap](t, objects, "ConfigMap/default-pool-epp")
			shipped, _ := os.ReadFile(configFile)
			if cm.Data[configName] != string(shipped) {
				t.Errorf("the EPP's config map holds\n%s\nnot the shipped config", cm.Data[configName])
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			t.Setenv("PREDICTION_SERVER_URL", "http://127.0.0.1:1")
			if _, err := inproc.New(ctx, []byte(cm.Data[configName]), prometheus.NewRegistry()); err != nil {
				t.Errorf("llm-d's loader refuses the rendered config: %v", err)
			}

			// The EPP finds the sidecars where the chart puts them.
			e := env(t, objects, epp)
			trainer, predictor := container(t, d, "training-server"), container(t, d, "prediction-server-1")
			if e["TRAINING_SERVER_URL"] != fmt.Sprintf("http://localhost:%d", trainer.Ports[0].ContainerPort) ||
				e["PREDICTION_SERVER_URL"] != fmt.Sprintf("http://localhost:%d", predictor.Ports[0].ContainerPort) {
				t.Errorf("EPP environment %v against sidecar ports %v and %v", e, trainer.Ports, predictor.Ports)
			}
			var names []string
			for _, c := range d.Spec.Template.Spec.Containers {
				names = append(names, c.Name)
			}
			if slices.Contains(names, "prediction-server-2") {
				t.Errorf("containers %v: one Headroom predictor serves more than the reference's four", names)
			}
			for _, c := range []corev1.Container{trainer, predictor} {
				if c.Image != "localhost:5000/headroom:latest" {
					t.Errorf("%s image %s", c.Name, c.Image)
				}
			}
			if p := predictor.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
				t.Errorf("prediction server readiness %+v: a predictor without a model would keep the EPP pod unready", p)
			}

			// Each sidecar's command line, run as the pod runs it (the
			// image's entrypoint and command when the chart gives none), on
			// loopback ports and a scratch data directory, is a Headroom
			// trainer and predictor.
			bin := headroomtest.Binary(t)
			tAddr, pAddr, besideAddr := headroomtest.FreePort(t), headroomtest.FreePort(t), headroomtest.FreePort(t)
			tEnv := imageEnv(t)
			for k, v := range env(t, objects, trainer) {
				tEnv[k] = v
			}
			checkDataDir(t, tEnv, trainer)
			tEnv["HEADROOM_DATA_DIR"], tEnv["HEADROOM_TRAINER_LISTEN"], tEnv["HEADROOM_PREDICTOR_LISTEN"] = t.TempDir(), tAddr, besideAddr
			start(t, bin, "headroom", imageCommand(t), tEnv)
			pEnv := imageEnv(t)
			for k, v := range env(t, objects, predictor) {
				pEnv[k] = v
			}
			checkDataDir(t, pEnv, predictor)
			pEnv["HEADROOM_DATA_DIR"], pEnv["TRAINING_SERVER_URL"] = t.TempDir(), "http://"+tAddr
			if len(predictor.Command) != 1 {
				t.Fatalf("prediction server command %v", predictor.Command)
			}
			pArgs := slices.Clone(predictor.Args)
			for i := range pArgs {
				switch {
				case i > 0 && pArgs[i-1] == "--host":
					pArgs[i] = "127.0.0.1" // loopback for the test; the chart binds 0.0.0.0
				case i > 0 && pArgs[i-1] == "--port":
					_, port, _ := net.SplitHostPort(pAddr)
					pArgs[i] = port
				}
			}
			start(t, bin, predictor.Command[0], pArgs, pEnv)
			if got := get(t, "http://"+tAddr+"/readyz"); !strings.Contains(got, "model_ready") {
				t.Errorf("trainer /readyz: %s", got)
			}
			if got := get(t, "http://"+pAddr+"/"); !strings.Contains(got, "Latency Predictor is running") || !strings.Contains(got, tAddr) {
				t.Errorf("predictor / : %s (want a predictor pulling from the trainer at %s)", got, tAddr)
			}
			// The trainer runs alone: `serve` would have started a
			// predictor beside it, on the image's predictor address.
			if c, err := net.DialTimeout("tcp", besideAddr, time.Second); err == nil {
				c.Close()
				t.Errorf("a predictor listens beside the training server, at %s", besideAddr)
			}
		})
	}
}

// imageEnv is the environment the Headroom image sets (its Dockerfile's
// ENV), which a container's own variables override.
func imageEnv(t *testing.T) map[string]string {
	t.Helper()
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	text := strings.ReplaceAll(string(df), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "ENV "); ok {
			for _, kv := range strings.Fields(rest) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					out[k] = v
				}
			}
		}
	}
	if out["HEADROOM_PREDICTOR_LISTEN"] == "" {
		t.Fatalf("no HEADROOM_ ENV in the Dockerfile: %v", out)
	}
	return out
}

// imageCommand is the Headroom image's CMD, what a container the chart gives
// no command runs.
func imageCommand(t *testing.T) []string {
	t.Helper()
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(df), "\n") {
		if rest, ok := strings.CutPrefix(line, "CMD "); ok {
			var cmd []string
			if err := yaml.Unmarshal([]byte(rest), &cmd); err != nil {
				t.Fatalf("CMD %s: %v", rest, err)
			}
			return cmd
		}
	}
	t.Fatal("no CMD in the Dockerfile")
	return nil
}

// checkDataDir: the sidecar's store is on the chart's volume.
func checkDataDir(t *testing.T, env map[string]string, c corev1.Container) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath == env["HEADROOM_DATA_DIR"] {
			return
		}
	}
	t.Errorf("%s: HEADROOM_DATA_DIR=%q is not one of its volume mounts %v", c.Name, env["HEADROOM_DATA_DIR"], c.VolumeMounts)
}

// start runs bin as argv0 with args and exactly env (and PATH) until the
// test ends.
func start(t *testing.T, bin, argv0 string, args []string, env map[string]string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Args[0] = argv0
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// get is the body of url's answer, retried until the server is up.
func get(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestChartRankingInProcess: with the producer's rankInProcess and the
// chart's predictionServers.count at 0 (docs/DEPLOY.md), the EPP pod has
// the trainer beside the EPP and no predictor, and the config loads into
// llm-d's scheduler with the environment the chart gives the EPP; the
// shipped config, which asks a predictor, does not.
func TestChartRankingInProcess(t *testing.T) {
	shipped, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	const at = "- type: headroom-pairs-producer\n  parameters:\n"
	if !strings.Contains(string(shipped), at) {
		t.Fatal("the shipped config's producer changed: update the test")
	}
	inProcess := strings.Replace(string(shipped), at, at+"    rankInProcess: true\n", 1)
	noPredictor := func(router map[string]any) {
		router["latencyPredictor"].(map[string]any)["predictionServers"].(map[string]any)["count"] = 0
	}
	for _, chart := range []string{"llm-d-router-gateway", "llm-d-router-standalone"} {
		t.Run(chart, func(t *testing.T) {
			for _, tt := range []struct {
				name, config string
				wantErr      string // "" for none
			}{
				{"rankInProcess", inProcess, ""},
				{"the shipped config", string(shipped), "no predictor"},
			} {
				objects := renderWith(t, chart, tt.config, noPredictor)
				d := decode[appsv1.Deployment](t, objects, "Deployment/default-pool-epp")
				var names []string
				for _, c := range d.Spec.Template.Spec.Containers {
					names = append(names, c.Name)
				}
				if !slices.Contains(names, "training-server") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "prediction-server") }) {
					t.Fatalf("containers %v: want the EPP and the training server alone", names)
				}
				e := env(t, objects, container(t, d, "epp"))
				trainer := container(t, d, "training-server")
				if e["TRAINING_SERVER_URL"] != fmt.Sprintf("http://localhost:%d", trainer.Ports[0].ContainerPort) || e["PREDICTION_SERVER_URL"] != "" {
					t.Fatalf("EPP environment %v", e)
				}
				cm := decode[corev1.ConfigMap](t, objects, "ConfigMap/default-pool-epp")
				t.Setenv("PREDICTION_SERVER_URL", e["PREDICTION_SERVER_URL"])
				t.Setenv("TRAINING_SERVER_URL", e["TRAINING_SERVER_URL"])
				ctx, cancel := context.WithCancel(context.Background())
				_, err := inproc.New(ctx, []byte(cm.Data[configName]), prometheus.NewRegistry())
				cancel()
				switch {
				case tt.wantErr == "" && err != nil:
					t.Errorf("%s: llm-d's loader refuses the rendered config: %v", tt.name, err)
				case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
					t.Errorf("%s: loading the config without a predictor: error %v, want one naming %q", tt.name, err, tt.wantErr)
				}
			}
		})
	}
}
