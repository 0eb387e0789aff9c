// Package deploy_test holds the container setup to what the README
// promises, since CI has no Docker daemon to try it: ports on loopback,
// one image built once, health checks ordering the services, the Go image
// of go.mod, and no local store in the build context.
package deploy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type composeFile struct {
	Services map[string]struct {
		Build       any               `yaml:"build"`
		Image       string            `yaml:"image"`
		PullPolicy  string            `yaml:"pull_policy"`
		Ports       []string          `yaml:"ports"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		DependsOn map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestCompose(t *testing.T) {
	var c composeFile
	if err := yaml.Unmarshal([]byte(readFile(t, "../docker-compose.yml")), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) != 2 {
		t.Fatalf("services %v, want trainer and predictor", c.Services)
	}
	var builders, images []string
	for name, s := range c.Services {
		if s.Build != nil {
			builders = append(builders, name)
		} else if s.PullPolicy != "never" {
			t.Errorf("%s: an image built by another service must never be pulled (pull_policy %q)", name, s.PullPolicy)
		}
		images = append(images, s.Image)
		for _, p := range s.Ports {
			// Host address first: bare "8000:8000" binds every interface.
			if !strings.HasPrefix(p, "${HEADROOM_BIND:-127.0.0.1}:${HEADROOM_") {
				t.Errorf("%s: port %q is not loopback-bound and configurable", name, p)
			}
		}
		if s.Healthcheck == nil || !strings.Contains(strings.Join(s.Healthcheck.Test, " "), "/healthz") {
			t.Errorf("%s: no health check on /healthz", name)
		}
		for _, tok := range []string{"HEADROOM_READ_TOKEN", "HEADROOM_WRITE_TOKEN"} {
			if _, ok := s.Environment[tok]; !ok {
				t.Errorf("%s: %s is not passed through", name, tok)
			}
		}
	}
	if !slices.Equal(builders, []string{"trainer"}) {
		t.Errorf("services that build: %v, want the trainer alone (one image, built once)", builders)
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(images))); len(distinct) != 1 || distinct[0] == "" {
		t.Errorf("images %v, want one for both services", images)
	}
	if dep := c.Services["predictor"].DependsOn["trainer"]; dep.Condition != "service_healthy" {
		t.Errorf("predictor starts when the trainer is %q, want service_healthy", dep.Condition)
	}
}

func TestDockerfileGoMatchesGoMod(t *testing.T) {
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(readFile(t, "../go.mod"))
	arg := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\S+)$`).FindStringSubmatch(readFile(t, "../Dockerfile"))
	if goLine == nil || arg == nil || goLine[1] != arg[1] {
		t.Fatalf("go.mod says go %v, the Dockerfile builds with GO_VERSION %v", goLine, arg)
	}
	if !strings.Contains(readFile(t, "../Dockerfile"), "FROM golang:${GO_VERSION}-bookworm") {
		t.Error("the build stage does not use GO_VERSION")
	}
}

func TestDockerignoreKeepsLocalDataOut(t *testing.T) {
	lines := strings.Split(readFile(t, "../.dockerignore"), "\n")
	for _, want := range []string{"data/", "**/*.db", ".git", "deploy/kubernetes/overlays/*/secrets/"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
}
