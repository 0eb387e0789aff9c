// Package kubernetes_test renders every kustomize overlay under
// deploy/kubernetes and decodes each object strictly into its Kubernetes
// API type, so a misspelt or misplaced field fails here rather than at
// kubectl apply. The Kubernetes modules are imported by this test only and
// never reach the headroom binary.
package kubernetes_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	strictjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// rendered is one overlay's output, decoded.
type rendered struct {
	deployments  []*appsv1.Deployment
	services     []*corev1.Service
	secrets      []*corev1.Secret
	configMaps   []*corev1.ConfigMap
	pvcs         []*corev1.PersistentVolumeClaim
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	pdbs         []*policyv1.PodDisruptionBudget
	policies     []*networkingv1.NetworkPolicy
	monitors     []*monitoringv1.ServiceMonitor
	namespaces   []*corev1.Namespace
	objectsCount int
}

// decodeStrict fills v from JSON, failing on unknown or duplicate fields
// and on fields whose case differs from the API's.
func decodeStrict(data []byte, v any) error {
	strictErrs, err := strictjson.UnmarshalStrict(data, v)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("%v", strictErrs)
	}
	return nil
}

func decode(t *testing.T, kind, apiVersion string, data []byte, r *rendered) {
	t.Helper()
	var err error
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		v := &appsv1.Deployment{}
		err = decodeStrict(data, v)
		r.deployments = append(r.deployments, v)
	case "v1 Service":
		v := &corev1.Service{}
		err = decodeStrict(data, v)
		r.services = append(r.services, v)
	case "v1 Secret":
		v := &corev1.Secret{}
		err = decodeStrict(data, v)
		r.secrets = append(r.secrets, v)
	case "v1 ConfigMap":
		v := &corev1.ConfigMap{}
		err = decodeStrict(data, v)
		r.configMaps = append(r.configMaps, v)
	case "v1 PersistentVolumeClaim":
		v := &corev1.PersistentVolumeClaim{}
		err = decodeStrict(data, v)
		r.pvcs = append(r.pvcs, v)
	case "v1 Namespace":
		v := &corev1.Namespace{}
		err = decodeStrict(data, v)
		r.namespaces = append(r.namespaces, v)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		v := &autoscalingv2.HorizontalPodAutoscaler{}
		err = decodeStrict(data, v)
		r.hpas = append(r.hpas, v)
	case "policy/v1 PodDisruptionBudget":
		v := &policyv1.PodDisruptionBudget{}
		err = decodeStrict(data, v)
		r.pdbs = append(r.pdbs, v)
	case "networking.k8s.io/v1 NetworkPolicy":
		v := &networkingv1.NetworkPolicy{}
		err = decodeStrict(data, v)
		r.policies = append(r.policies, v)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		v := &monitoringv1.ServiceMonitor{}
		err = decodeStrict(data, v)
		r.monitors = append(r.monitors, v)
	default:
		t.Fatalf("%s %s: a kind this test cannot check; add its type", apiVersion, kind)
	}
	if err != nil {
		t.Fatalf("%s %s does not decode strictly: %v\n%s", apiVersion, kind, err, data)
	}
	r.objectsCount++
}

// loadTree copies deploy/kubernetes into an in-memory file system, and
// deploy/llm-d beside it (the custom EPP's component, which the llm-d-pd
// overlay includes), with the Secret's files made by scripts/k8s-secrets.sh
// as a user would make them (they are never committed).
func loadTree(t *testing.T) filesys.FileSystem {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	for _, tree := range []struct{ from, to string }{{".", "/k"}, {"../llm-d", "/llm-d"}} {
		err := filepath.WalkDir(tree.from, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(tree.from, path)
			if err != nil {
				return err
			}
			return fs.WriteFile(filepath.Join(tree.to, rel), data)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	secrets := t.TempDir()
	out, err := exec.Command("bash", "../../scripts/k8s-secrets.sh", "--tokens", secrets).CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/k8s-secrets.sh: %v\n%s", err, out)
	}
	for _, name := range []string{"signing-key", "tokens"} {
		data, err := os.ReadFile(filepath.Join(secrets, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile("/k/overlays/standalone/secrets/"+name, data); err != nil {
			t.Fatal(err)
		}
	}
	return fs
}

func render(t *testing.T, fs filesys.FileSystem, dir string) *rendered {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/k/"+dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{}
	for _, res := range resMap.Resources() {
		data, err := res.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		decode(t, res.GetKind(), res.GetApiVersion(), data, r)
	}
	return r
}

// overlays lists every directory holding a kustomization, so a new overlay
// cannot escape the test.
func overlays(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, pattern := range []string{"overlays/*/kustomization.yaml"} {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			dirs = append(dirs, filepath.Dir(m))
		}
	}
	if len(dirs) < 3 {
		t.Fatalf("found overlays %v, want standalone, servicemonitor and llm-d at least", dirs)
	}
	return dirs
}

func TestEveryOverlayRendersAndDecodesStrictly(t *testing.T) {
	fs := loadTree(t)
	for _, dir := range overlays(t) {
		t.Run(dir, func(t *testing.T) {
			r := render(t, fs, dir)
			if r.objectsCount == 0 {
				t.Fatal("rendered nothing")
			}
			for _, d := range r.deployments {
				checkPod(t, d.Name, &d.Spec.Template.Spec, d.Spec.Template.Labels, r)
				sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
				if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("deployment %s: selector does not match its own pods", d.Name)
				}
			}
			for _, s := range r.services {
				if len(podsSelectedBy(r, s.Spec.Selector)) == 0 {
					t.Errorf("service %s selects no pods", s.Name)
				}
			}
			for _, p := range r.pdbs {
				if len(podsSelectedBy(r, p.Spec.Selector.MatchLabels)) == 0 {
					t.Errorf("PodDisruptionBudget %s selects no pods", p.Name)
				}
			}
			for _, h := range r.hpas {
				if findDeployment(r, h.Spec.ScaleTargetRef.Name) == nil {
					t.Errorf("HorizontalPodAutoscaler %s scales %s, which is not rendered", h.Name, h.Spec.ScaleTargetRef.Name)
				}
			}
			for _, m := range r.monitors {
				svc := findService(r, m.Spec.Selector.MatchLabels)
				if svc == nil {
					t.Errorf("ServiceMonitor %s selects no service", m.Name)
					continue
				}
				for _, ep := range m.Spec.Endpoints {
					if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
						t.Errorf("ServiceMonitor %s scrapes port %q, not a port of service %s", m.Name, ep.Port, svc.Name)
					}
				}
			}
		})
	}
}

// checkPod holds every pod template to what the deployment promises:
// volumes exist, Headroom's containers run non-root on a read-only root
// file system with both probes and resource requests, and every variable
// they are given is one the binary reads.
func checkPod(t *testing.T, name string, pod *corev1.PodSpec, podLabels map[string]string, r *rendered) {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounted := map[string]bool{}
	for _, c := range pod.Containers {
		for _, m := range c.VolumeMounts {
			mounted[m.Name] = true
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("%s/%s mounts volume %q, which the pod does not have", name, c.Name, m.Name)
			}
		}
	}
	for v, vol := range volumes {
		if !mounted[v] {
			t.Errorf("%s: volume %q is mounted by no container", name, v)
		}
		if vol.Secret != nil && len(r.secrets) > 0 && !slices.ContainsFunc(r.secrets, func(s *corev1.Secret) bool { return s.Name == vol.Secret.SecretName }) {
			t.Errorf("%s: volume %q names secret %q, which is not rendered", name, v, vol.Secret.SecretName)
		}
	}
	for _, c := range pod.Containers {
		if !strings.HasPrefix(c.Image, "headroom:") && !strings.Contains(c.Image, "/headroom:") {
			if strings.Contains(c.Image, "latency-predictor") {
				t.Errorf("%s: reference container %s (%s) is still there", name, c.Name, c.Image)
			}
			continue
		}
		checkHeadroomContainer(t, name, pod, &c)
	}
}

func checkHeadroomContainer(t *testing.T, name string, pod *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	where := name + "/" + c.Name
	sc, psc := c.SecurityContext, pod.SecurityContext
	nonRoot := (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
	uid := (sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 10001) || (psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 10001)
	if !nonRoot || !uid {
		t.Errorf("%s: want runAsNonRoot and the image's uid 10001", where)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: root file system not read-only", where)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: privilege escalation allowed", where)
	}
	if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: capabilities not dropped", where)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" }) {
		t.Errorf("%s: no writable /tmp (xgboost's run directories, bundle temp files)", where)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/data" }) {
		t.Errorf("%s: no writable /data", where)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("%s: liveness probe is not GET /healthz", where)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		t.Errorf("%s: no HTTP readiness probe", where)
	} else if p := c.ReadinessProbe.HTTPGet.Path; p != "/readyz" && p != "/healthz" {
		t.Errorf("%s: readiness probe on %s", where, p)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: want CPU and memory requests and a memory limit", where)
	}
	if len(c.Args) != 1 || (c.Args[0] != "trainer" && c.Args[0] != "predictor") {
		t.Errorf("%s: args %v, want the trainer or predictor subcommand", where, c.Args)
	}
	for _, e := range c.Env {
		if !knownVariable(t, e.Name) {
			t.Errorf("%s: headroom reads no variable %s", where, e.Name)
		}
	}
}

var flagSources = sync.OnceValues(func() (string, error) {
	var all strings.Builder
	// The flags are registered by the command or by the package assembling
	// its servers.
	var files []string
	for _, pattern := range []string{"../../cmd/headroom/*.go", "../../service/*.go"} {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			return "", err
		}
		files = append(files, matches...)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		all.Write(data)
	}
	return all.String(), nil
})

// knownVariable reports whether the headroom command reads the variable:
// HEADROOM_<FLAG> for each of its flags, or a reference name it maps.
func knownVariable(t *testing.T, name string) bool {
	t.Helper()
	src, err := flagSources()
	if err != nil {
		t.Fatal(err)
	}
	if flag, ok := strings.CutPrefix(name, "HEADROOM_"); ok {
		flag = strings.ToLower(strings.ReplaceAll(flag, "_", "-"))
		return regexp.MustCompile(`fs\.\w+Var\([^,]+, "` + regexp.QuoteMeta(flag) + `"`).MatchString(src)
	}
	return strings.Contains(src, `"`+name+`"`)
}

func TestStandaloneShape(t *testing.T) {
	r := render(t, loadTree(t), "overlays/standalone")
	trainer, predictor := findDeployment(r, "headroom-trainer"), findDeployment(r, "headroom-predictor")
	if trainer == nil || predictor == nil {
		t.Fatal("want deployments headroom-trainer and headroom-predictor")
	}
	// One writer of the store: a second trainer, even briefly during a
	// rolling update, would find the store locked.
	if trainer.Spec.Replicas == nil || *trainer.Spec.Replicas != 1 || trainer.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("trainer: replicas %v strategy %s, want 1 and Recreate", trainer.Spec.Replicas, trainer.Spec.Strategy.Type)
	}
	var claim string
	for _, v := range trainer.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	if claim == "" || !slices.ContainsFunc(r.pvcs, func(p *corev1.PersistentVolumeClaim) bool { return p.Name == claim }) {
		t.Errorf("trainer: store volume claim %q not rendered", claim)
	}
	if len(r.hpas) != 1 || r.hpas[0].Spec.ScaleTargetRef.Name != predictor.Name || r.hpas[0].Spec.MinReplicas == nil || *r.hpas[0].Spec.MinReplicas < 2 {
		t.Errorf("want one autoscaler over the predictors with at least 2 replicas")
	}
	if len(r.pdbs) != 1 || len(podsSelectedBy(r, r.pdbs[0].Spec.Selector.MatchLabels)) != 1 || podsSelectedBy(r, r.pdbs[0].Spec.Selector.MatchLabels)[0] != predictor {
		t.Errorf("want one disruption budget over the predictors")
	}
	if len(r.secrets) != 1 || len(r.secrets[0].Data["signing-key"]) < 16 || !strings.Contains(string(r.secrets[0].Data["tokens"]), "write=") {
		t.Errorf("want one secret with a signing key and tokens, got %d", len(r.secrets))
	}
	env := func(d *appsv1.Deployment, name string) string {
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	if got := env(predictor, "HEADROOM_TRAINER_URL"); got != "http://headroom-trainer:8000" {
		t.Errorf("predictor pulls bundles from %q", got)
	}
	if env(trainer, "HEADROOM_SIGNING_KEY_FILE") == "" || env(predictor, "HEADROOM_SIGNING_KEY_FILE") == "" {
		t.Error("trainer and predictor must both get the signing key")
	}
	for _, d := range []*appsv1.Deployment{trainer, predictor} {
		if !strings.HasPrefix(env(d, "HEADROOM_"+strings.ToUpper(d.Spec.Template.Spec.Containers[0].Args[0])+"_LISTEN"), "0.0.0.0:") {
			t.Errorf("%s does not listen on the pod's address", d.Name)
		}
	}
	for _, ns := range r.namespaces {
		if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("namespace %s: want the restricted pod security standard", ns.Name)
		}
	}
}

// TestNetworkPolicies: nothing reaches Headroom's pods but what a rule lets
// in, and each role is reachable only on its own port.
func TestNetworkPolicies(t *testing.T) {
	r := render(t, loadTree(t), "overlays/standalone")
	allowed := func(d *appsv1.Deployment, from map[string]string) []int32 {
		var ports []int32
		for _, p := range r.policies {
			if !labels.SelectorFromSet(p.Spec.PodSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
				continue
			}
			for _, rule := range p.Spec.Ingress {
				for _, peer := range rule.From {
					if peer.PodSelector != nil && labels.SelectorFromSet(peer.PodSelector.MatchLabels).Matches(labels.Set(from)) {
						for _, port := range rule.Ports {
							ports = append(ports, port.Port.IntVal)
						}
					}
				}
			}
		}
		return ports
	}
	trainer, predictor := findDeployment(r, "headroom-trainer"), findDeployment(r, "headroom-predictor")
	for _, d := range []*appsv1.Deployment{trainer, predictor} {
		denied := slices.ContainsFunc(r.policies, func(p *networkingv1.NetworkPolicy) bool {
			return len(p.Spec.Ingress) == 0 && slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) &&
				labels.SelectorFromSet(p.Spec.PodSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels))
		})
		if !denied {
			t.Errorf("%s: no default-deny policy", d.Name)
		}
	}
	cases := []struct {
		name string
		to   *appsv1.Deployment
		from map[string]string
		want []int32
	}{
		{"sample writer to trainer", trainer, map[string]string{"headroom.io/sample-writer": "true"}, []int32{8000}},
		{"predictor pulls bundles", trainer, predictor.Spec.Template.Labels, []int32{8000}},
		{"prometheus to trainer", trainer, map[string]string{"headroom.io/metrics-scraper": "true"}, []int32{8000}},
		{"predict client to trainer", trainer, map[string]string{"headroom.io/predict-client": "true"}, nil},
		{"stranger to trainer", trainer, map[string]string{"app": "other"}, nil},
		{"predict client to predictor", predictor, map[string]string{"headroom.io/predict-client": "true"}, []int32{8001}},
		{"prometheus to predictor", predictor, map[string]string{"headroom.io/metrics-scraper": "true"}, []int32{8001}},
		{"sample writer to predictor", predictor, map[string]string{"headroom.io/sample-writer": "true"}, nil},
		{"stranger to predictor", predictor, map[string]string{"app": "other"}, nil},
	}
	for _, c := range cases {
		if got := allowed(c.to, c.from); !slices.Equal(got, c.want) {
			t.Errorf("%s: ports %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLLMDSidecars: in llm-d's endpoint picker, the reference's training
// and prediction sidecars are gone, Headroom's serve on the ports the
// router's own variables name, and nothing of the reference is left over.
func TestLLMDSidecars(t *testing.T) {
	r := render(t, loadTree(t), "overlays/llm-d")
	if len(r.deployments) != 1 {
		t.Fatalf("want the EPP deployment alone, got %d deployments", len(r.deployments))
	}
	pod := r.deployments[0].Spec.Template.Spec
	var names []string
	ports := map[string]int32{} // container name -> port
	var routerEnv map[string]string
	for _, c := range pod.Containers {
		names = append(names, c.Name)
		for _, p := range c.Ports {
			ports[c.Name] = p.ContainerPort
		}
		if c.Name == "epp" {
			routerEnv = map[string]string{}
			for _, e := range c.Env {
				routerEnv[e.Name] = e.Value
			}
		}
	}
	slices.Sort(names)
	if want := []string{"epp", "headroom-predictor", "headroom-trainer"}; !slices.Equal(names, want) {
		t.Fatalf("containers %v, want %v", names, want)
	}
	for _, c := range []struct{ env, container string }{
		{"TRAINING_SERVER_URL", "headroom-trainer"},
		{"PREDICTION_SERVER_URL", "headroom-predictor"},
	} {
		if want := fmt.Sprintf("http://localhost:%d", ports[c.container]); routerEnv[c.env] != want {
			t.Errorf("router's %s = %q, want %q (%s)", c.env, routerEnv[c.env], want, c.container)
		}
	}
	for _, v := range pod.Volumes {
		if strings.Contains(v.Name, "prediction-server") || strings.Contains(v.Name, "training-server") {
			t.Errorf("reference volume %s left behind", v.Name)
		}
	}
}

// The llm-d-pd overlay runs the custom EPP: its image, the config the EPP
// reads last being Headroom's P/D config as committed, mounted from a
// rendered ConfigMap, the Alpha plugins allowed, and Headroom's sidecars
// as in the llm-d overlay.
func TestLLMDCustomEPP(t *testing.T) {
	r := render(t, loadTree(t), "overlays/llm-d-pd")
	if len(r.deployments) != 1 {
		t.Fatalf("want the EPP deployment alone, got %d deployments", len(r.deployments))
	}
	pod := r.deployments[0].Spec.Template.Spec
	var epp *corev1.Container
	var names []string
	for i := range pod.Containers {
		names = append(names, pod.Containers[i].Name)
		if pod.Containers[i].Name == "epp" {
			epp = &pod.Containers[i]
		}
	}
	slices.Sort(names)
	if want := []string{"epp", "headroom-predictor", "headroom-trainer"}; !slices.Equal(names, want) {
		t.Fatalf("containers %v, want %v", names, want)
	}
	if !strings.HasPrefix(epp.Image, "headroom-epp:") {
		t.Errorf("EPP image %s, want the custom EPP's", epp.Image)
	}
	configFile := ""
	for i, a := range epp.Args {
		if a == "--config-file" && i+1 < len(epp.Args) {
			configFile = epp.Args[i+1] // the EPP keeps the last value given
		}
	}
	if !slices.Contains(epp.Args, "--allow-experimental-plugins") {
		t.Errorf("EPP args %v: Headroom's plugins are Alpha and need --allow-experimental-plugins", epp.Args)
	}
	want, err := os.ReadFile("../llm-d/pd-headroom-epp-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir, file := filepath.Split(configFile)
	var mount *corev1.VolumeMount
	for i, m := range epp.VolumeMounts {
		if filepath.Clean(m.MountPath) == filepath.Clean(dir) {
			mount = &epp.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("the EPP reads %q, in no directory it mounts (%v)", configFile, epp.VolumeMounts)
	}
	var cm *corev1.ConfigMap
	for _, v := range pod.Volumes {
		if v.Name != mount.Name || v.ConfigMap == nil {
			continue
		}
		for _, c := range r.configMaps {
			if c.Name == v.ConfigMap.Name && c.Namespace == r.deployments[0].Namespace {
				cm = c
			}
		}
	}
	if cm == nil {
		t.Fatalf("volume %s is not a ConfigMap rendered beside the EPP", mount.Name)
	}
	if cm.Data[file] != string(want) {
		t.Errorf("the EPP's %s is not deploy/llm-d/pd-headroom-epp-config.yaml:\n%s", configFile, cm.Data[file])
	}
}

func TestDecodeStrictRejectsUnknownFields(t *testing.T) {
	for _, doc := range []string{
		`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replica":1}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{"spec":{"containers":[{"name":"x","readinessprobe":{}}]}}}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a","name":"b"}}`,
	} {
		if err := decodeStrict([]byte(doc), &appsv1.Deployment{}); err == nil {
			t.Errorf("accepted %s", doc)
		}
	}
}

func podsSelectedBy(r *rendered, selector map[string]string) []*appsv1.Deployment {
	if len(selector) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(selector)
	var out []*appsv1.Deployment
	for _, d := range r.deployments {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

func findDeployment(r *rendered, name string) *appsv1.Deployment {
	for _, d := range r.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func findService(r *rendered, selector map[string]string) *corev1.Service {
	sel := labels.SelectorFromSet(selector)
	for _, s := range r.services {
		if sel.Matches(labels.Set(s.Labels)) {
			return s
		}
	}
	return nil
}
