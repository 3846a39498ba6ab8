package opstest

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/respgate"

// valueSets are the values the chart is rendered with: the defaults and three deployments unlike
// them. Each is what an operator would pass with -f.
var valueSets = map[string]string{
	"default": ``,
	"production": `
replicaCount: 3
image: {repository: registry.example.com/respgate, tag: "1.2.3", pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
settings:
  upstream-url: http://vllm.llm.svc:8000/v1
  log-level: warn
  retention: 720h
  max-streams: "500"
  reasoning-exposure: hidden
secrets:
  databaseURL: {name: pg-app, key: uri}
  apiKeys: {name: respgate-keys, key: keys}
  upstreamAPIKey: {name: vllm-key, key: token}
  sealKeys: {name: respgate-seal, key: seal-keys}
drain: {preStopSleepSeconds: 10, shutdownTimeoutSeconds: 120, commitTimeoutSeconds: 20, marginSeconds: 5}
autoscaling: {enabled: true, minReplicas: 3, maxReplicas: 12, targetCPUUtilizationPercentage: 60}
serviceMonitor: {enabled: true, interval: 15s, labels: {release: kube-prometheus-stack}}
podDisruptionBudget: {enabled: true, maxUnavailable: 1}
extraEnv: [{name: OTEL_EXPORTER_OTLP_ENDPOINT, value: "http://otel-collector:4318"}]
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector: {matchLabels: {app.kubernetes.io/name: respgate}}
resources: {requests: {cpu: "2", memory: 1Gi}, limits: {memory: 4Gi}}
`,
	"sqlite": `
replicaCount: 1
sqlite: {enabled: true, size: 20Gi, storageClassName: fast-ssd}
secrets: {databaseURL: {name: ""}}
podDisruptionBudget: {enabled: true}
`,
	"plain": `
fullnameOverride: gateway
serviceAccount: {create: false, name: llm-gateway}
service: {type: LoadBalancer, port: 80, annotations: {service.beta.kubernetes.io/aws-load-balancer-internal: "true"}}
migrations: {enabled: false}
podDisruptionBudget: {enabled: false}
nodeSelector: {pool: cpu}
tolerations: [{key: dedicated, operator: Equal, value: gateway, effect: NoSchedule}]
`,
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor the chart writes (its
// CRD is not among the Kubernetes API types); decoded strictly like the others.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is one value set's manifests, decoded.
type rendered struct {
	deploy  *appsv1.Deployment
	service *corev1.Service
	config  *corev1.ConfigMap
	account *corev1.ServiceAccount
	pdb     *policyv1.PodDisruptionBudget
	hpa     *autoscalingv2.HorizontalPodAutoscaler
	job     *batchv1.Job
	pvc     *corev1.PersistentVolumeClaim
	monitor *serviceMonitor
	kinds   []string
}

func parseValues(t *testing.T, src string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.UnmarshalStrict([]byte(src), &vals); err != nil {
		t.Fatalf("values: %v", err)
	}
	return vals
}

// render renders the chart as `helm template rg --namespace llm` would, with vals.
func render(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: "rg", Namespace: "llm", IsInstall: true, Revision: 1}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, top)
}

// decode splits every rendered manifest into documents and decodes each strictly (unknown or
// duplicate fields fail) into its Kubernetes type.
func decode(t *testing.T, out map[string]string) *rendered {
	t.Helper()
	r := &rendered{}
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasSuffix(name, ".tpl") {
			continue
		}
		for i, doc := range strings.Split(out[name], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s #%d: %v", name, i, err)
			}
			var obj any
			switch tm.APIVersion + "/" + tm.Kind {
			case "apps/v1/Deployment":
				r.deploy = &appsv1.Deployment{}
				obj = r.deploy
			case "v1/Service":
				r.service = &corev1.Service{}
				obj = r.service
			case "v1/ConfigMap":
				r.config = &corev1.ConfigMap{}
				obj = r.config
			case "v1/ServiceAccount":
				r.account = &corev1.ServiceAccount{}
				obj = r.account
			case "policy/v1/PodDisruptionBudget":
				r.pdb = &policyv1.PodDisruptionBudget{}
				obj = r.pdb
			case "autoscaling/v2/HorizontalPodAutoscaler":
				r.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
				obj = r.hpa
			case "batch/v1/Job":
				r.job = &batchv1.Job{}
				obj = r.job
			case "v1/PersistentVolumeClaim":
				r.pvc = &corev1.PersistentVolumeClaim{}
				obj = r.pvc
			case "monitoring.coreos.com/v1/ServiceMonitor":
				r.monitor = &serviceMonitor{}
				obj = r.monitor
			default:
				t.Fatalf("%s #%d: unexpected %s %s (a Secret or an unknown kind)", name, i, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s #%d (%s): strict decode: %v\n%s", name, i, tm.Kind, err, doc)
			}
			r.kinds = append(r.kinds, tm.Kind)
		}
	}
	return r
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// flagEnvs are the RESPGATE_* variables docs/configuration.md lists (a test in cmd/respgate keeps
// that page equal to the flags).
func flagEnvs(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`RESPGATE_[A-Z0-9_]+`).FindAllString(string(b), -1) {
		out[m] = true
	}
	return out
}

func TestChartRendersAndValidatesForEveryValueSet(t *testing.T) {
	envs := flagEnvs(t)
	for _, name := range slices.Sorted(maps.Keys(valueSets)) {
		t.Run(name, func(t *testing.T) {
			vals := parseValues(t, valueSets[name])
			out, err := render(t, vals)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			r := decode(t, out)
			checkDeployment(t, name, r, envs)
			checkService(t, r)
			switch name {
			case "sqlite":
				if r.pvc == nil || r.job != nil || r.pdb != nil {
					t.Errorf("sqlite: want a PVC, no migration Job and no PDB; got %v", r.kinds)
				}
				if r.deploy.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
					t.Errorf("sqlite: strategy %q, want Recreate (one volume, one writer)", r.deploy.Spec.Strategy.Type)
				}
				if got := r.config.Data["RESPGATE_DATABASE_URL"]; !strings.HasPrefix(got, "sqlite:/var/lib/respgate/data/") {
					t.Errorf("sqlite: RESPGATE_DATABASE_URL %q, want an absolute path on the volume", got)
				}
			case "production":
				if r.hpa == nil || r.hpa.Spec.ScaleTargetRef.Name != r.deploy.Name || r.hpa.Spec.MinReplicas == nil || *r.hpa.Spec.MinReplicas != 3 {
					t.Errorf("production: HPA missing or not aimed at the Deployment")
				}
				if r.deploy.Spec.Replicas != nil {
					t.Errorf("production: replicas set with an HPA (they would fight)")
				}
				if r.monitor == nil || r.monitor.Spec.Endpoints[0].Port != "http" || r.monitor.Spec.Endpoints[0].Path != "/metrics" ||
					!labelsMatch(r.monitor.Spec.Selector.MatchLabels, r.service.Labels) {
					t.Errorf("production: ServiceMonitor missing or not aimed at the Service's /metrics")
				}
				if r.monitor != nil && r.monitor.Labels["release"] != "kube-prometheus-stack" {
					t.Errorf("production: ServiceMonitor labels %v lack the operator's selector label", r.monitor.Labels)
				}
			case "plain":
				if r.account != nil || r.deploy.Spec.Template.Spec.ServiceAccountName != "llm-gateway" {
					t.Errorf("plain: want the existing ServiceAccount llm-gateway and none created")
				}
				if r.job != nil || r.pdb != nil || r.deploy.Name != "gateway" {
					t.Errorf("plain: kinds %v, name %q", r.kinds, r.deploy.Name)
				}
			}
			if name != "sqlite" && name != "plain" {
				checkJob(t, r)
			}
			if r.pdb != nil && !labelsMatch(r.pdb.Spec.Selector.MatchLabels, r.deploy.Spec.Template.Labels) {
				t.Errorf("PDB selector %v does not select the pods", r.pdb.Spec.Selector.MatchLabels)
			}
		})
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func labelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func checkSecurity(t *testing.T, what string, pod *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	ps := pod.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Errorf("%s: pod must run as non-root: %+v", what, ps)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: the service account token is mounted; respgate never calls the API server", what)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatalf("%s: container has no securityContext", what)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: root filesystem is writable", what)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: privilege escalation allowed", what)
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Errorf("%s: container may run as root", what)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("%s: capabilities %+v, want all dropped", what, sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: seccomp %+v, want RuntimeDefault", what, sc.SeccompProfile)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("%s: memory request and limit must be set: %+v", what, c.Resources)
	}
	// Secrets come from Secrets, never values in the chart.
	for _, e := range c.Env {
		if isSecretEnv(e.Name) && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("%s: %s is not read from a Secret", what, e.Name)
		}
	}
}

func isSecretEnv(name string) bool {
	return slices.Contains([]string{"RESPGATE_DATABASE_URL", "RESPGATE_API_KEYS", "RESPGATE_UPSTREAM_API_KEY", "RESPGATE_SEAL_KEYS"}, name)
}

func checkDeployment(t *testing.T, set string, r *rendered, envs map[string]bool) {
	t.Helper()
	if r.deploy == nil || r.config == nil {
		t.Fatalf("no Deployment or ConfigMap among %v", r.kinds)
	}
	pod := &r.deploy.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := &pod.Containers[0]
	checkSecurity(t, "deployment", pod, c)
	if !labelsMatch(r.deploy.Spec.Selector.MatchLabels, r.deploy.Spec.Template.Labels) {
		t.Errorf("the Deployment's selector does not select its pods")
	}
	port := func(p *corev1.Probe, path string, what string) {
		t.Helper()
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v, want GET %s on the http port", what, p, path)
		}
	}
	port(c.LivenessProbe, "/healthz", "liveness")
	port(c.StartupProbe, "/healthz", "startup")
	port(c.ReadinessProbe, "/readyz", "readiness")
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v, want http on 8080", c.Ports)
	}
	if r.config.Data["RESPGATE_LISTEN"] != ":8080" {
		t.Errorf("RESPGATE_LISTEN %q, want :8080 (the container port)", r.config.Data["RESPGATE_LISTEN"])
	}
	// Every variable the ConfigMap sets is a real respgate setting.
	for k := range r.config.Data {
		if !envs[k] {
			t.Errorf("ConfigMap sets %s, which is not a respgate setting (docs/configuration.md)", k)
		}
		if isSecretEnv(k) && !(k == "RESPGATE_DATABASE_URL" && set == "sqlite") {
			t.Errorf("ConfigMap holds the secret %s", k)
		}
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "RESPGATE_") && !envs[e.Name] {
			t.Errorf("env %s is not a respgate setting", e.Name)
		}
	}
	// The pod outlives respgate's whole drain: preStop, --shutdown-timeout, then up to
	// max(5s, --commit-timeout) for the terminal events of the streams ended at the deadline.
	shutdown := mustDur(t, r.config.Data["RESPGATE_SHUTDOWN_TIMEOUT"])
	commit := mustDur(t, r.config.Data["RESPGATE_COMMIT_TIMEOUT"])
	var preStop int64
	if l := c.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Sleep == nil {
		t.Errorf("no preStop sleep: the endpoint may still get requests after SIGTERM")
	} else {
		preStop = l.PreStop.Sleep.Seconds
	}
	need := preStop + shutdown + max(5, commit)
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= need {
		t.Errorf("terminationGracePeriodSeconds %v, want more than %d (preStop + drain + commit grace)", g, need)
	}
	if set == "production" {
		if shutdown != 120 || c.Image != "registry.example.com/respgate:1.2.3" {
			t.Errorf("production values not applied: shutdown %d, image %q", shutdown, c.Image)
		}
		if r.config.Data["RESPGATE_SEAL_KEYS_FILE"] == "" || !hasMount(c, "/etc/respgate/seal") {
			t.Errorf("seal keys are not mounted as --seal-keys-file")
		}
		for _, want := range []string{"RESPGATE_DATABASE_URL", "RESPGATE_API_KEYS", "RESPGATE_UPSTREAM_API_KEY"} {
			if !hasEnv(c, want) {
				t.Errorf("env lacks %s", want)
			}
		}
		if r.config.Data["RESPGATE_RETENTION"] != "720h" {
			t.Errorf("settings.retention not passed: %v", r.config.Data)
		}
	}
	if !hasMount(c, "/tmp") {
		t.Errorf("no writable /tmp on a read-only root filesystem")
	}
}

func mustDur(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscanf(s, "%ds", &n); err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return n
}

func hasMount(c *corev1.Container, path string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == path })
}

func hasEnv(c *corev1.Container, name string) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
}

func checkService(t *testing.T, r *rendered) {
	t.Helper()
	if r.service == nil {
		t.Fatal("no Service")
	}
	if !labelsMatch(r.service.Spec.Selector, r.deploy.Spec.Template.Labels) {
		t.Errorf("the Service selects no pod of the Deployment")
	}
	if len(r.service.Spec.Ports) != 1 || r.service.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("service ports %+v, want the named port http", r.service.Spec.Ports)
	}
}

func checkJob(t *testing.T, r *rendered) {
	t.Helper()
	if r.job == nil {
		t.Fatalf("no migration Job among %v", r.kinds)
	}
	if hook := r.job.Annotations["helm.sh/hook"]; hook != "pre-install,pre-upgrade" {
		t.Errorf("migration Job hook %q: it must run once before the replicas of each release", hook)
	}
	pod := &r.job.Spec.Template.Spec
	c := &pod.Containers[0]
	checkSecurity(t, "migration job", pod, c)
	if !slices.Equal(c.Args, []string{"admin", "migrate", "up"}) {
		t.Errorf("migration Job args %q", c.Args)
	}
	if pod.RestartPolicy != corev1.RestartPolicyNever || !hasEnv(c, "RESPGATE_DATABASE_URL") {
		t.Errorf("migration Job: restart %q, env %+v", pod.RestartPolicy, c.Env)
	}
	// The hook runs before the chart's own ServiceAccount and ConfigMap exist.
	if pod.ServiceAccountName != "" || len(c.EnvFrom) > 0 {
		t.Errorf("migration Job depends on resources the release has not created yet")
	}
}

func TestChartRefusesValuesThatCannotWork(t *testing.T) {
	for name, src := range map[string]string{
		"sqlite with two replicas":   `{sqlite: {enabled: true}, replicaCount: 2}`,
		"sqlite with autoscaling":    `{sqlite: {enabled: true}, replicaCount: 1, autoscaling: {enabled: true}}`,
		"no database secret":         `{secrets: {databaseURL: {name: ""}}}`,
		"a secret in settings":       `{settings: {database-url: "postgres://u:p@db/x"}}`,
		"drain outside drain values": `{settings: {shutdown-timeout: 10m}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(t, parseValues(t, src)); err == nil {
				t.Errorf("rendered; want a failure naming the value")
			}
		})
	}
}

// TestChartLints runs the rules of `helm lint --strict` for every value set: warnings fail too.
func TestChartLints(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(valueSets)) {
		t.Run(name, func(t *testing.T) {
			res := lint.RunAll(chartDir, parseValues(t, valueSets[name]), "llm")
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("%s", m)
				}
			}
		})
	}
}

// TestChartLintCatchesABrokenTemplate keeps the lint test honest: the same rules on a copy of the
// chart with a template that does not parse must fail.
func TestChartLintCatchesABrokenTemplate(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "templates", "broken.yaml"), []byte("kind: {{ if }}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := lint.RunAll(dir, nil, "llm")
	if res.HighestSeverity < support.ErrorSev {
		t.Errorf("lint passed a broken template: %v", res.Messages)
	}
}

// TestChartReadmeDocumentsEveryValue keeps the chart's README.md a complete reference: every
// top-level value, and every key below it, is named there.
func TestChartReadmeDocumentsEveryValue(t *testing.T) {
	readme := mustRead(t, filepath.Join(chartDir, "README.md"))
	vals := parseValues(t, mustRead(t, filepath.Join(chartDir, "values.yaml")))
	var walk func(prefix string, v map[string]any)
	walk = func(prefix string, v map[string]any) {
		for k, sub := range v {
			path := prefix + k
			if !strings.Contains(readme, "`"+path+"`") && prefix != "settings." {
				t.Errorf("README.md does not document `%s`", path)
			}
			if m, ok := sub.(map[string]any); ok && prefix == "" && len(m) > 0 {
				walk(path+".", m)
			}
		}
	}
	walk("", vals)
	if !bytes.Contains([]byte(readme), []byte("helm install")) {
		t.Errorf("README.md lacks the install command")
	}
}

// TestDecodeRejectsUnknownFields keeps the strict decoding honest: a misspelt field fails.
func TestDecodeRejectsUnknownFields(t *testing.T) {
	doc := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n"
	if err := yaml.UnmarshalStrict([]byte(doc), &appsv1.Deployment{}); err == nil {
		t.Error("a Deployment with spec.replica decoded without error")
	}
}
