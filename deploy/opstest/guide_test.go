package opstest

import (
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
)

// guideInstall is the install of docs/operations.md ("Install"): its shell lines, each with its
// continuation lines joined.
func guideInstall(t *testing.T) []string {
	t.Helper()
	doc := mustRead(t, "../../docs/operations.md")
	i := strings.Index(doc, "\nhelm install ")
	if i < 0 {
		t.Fatal("docs/operations.md has no helm install")
	}
	start := strings.LastIndex(doc[:i], "```text\n")
	end := strings.Index(doc[i:], "```")
	if start < 0 || end < 0 {
		t.Fatal("docs/operations.md: the helm install is not in a ```text block")
	}
	block := strings.ReplaceAll(doc[start+len("```text\n"):i+end], "\\\n", " ")
	var lines []string
	for l := range strings.SplitSeq(block, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestOperationsGuideInstallRendersAsWritten renders the chart with the guide's own helm install
// (its release name, namespace and every --set) and checks that what the guide runs next finds
// what the chart made: the Deployment the rollout and logs commands name, the image the guide
// built and pushed, every Secret and key the pods read created by the guide's kubectl lines, and
// the ServiceMonitor it enables.
func TestOperationsGuideInstallRendersAsWritten(t *testing.T) {
	lines := guideInstall(t)
	secrets := map[string]map[string]bool{} // created by the guide: name → keys
	var image, deployName string
	vals := map[string]any{}
	secretRe := regexp.MustCompile(`^kubectl -n llm create secret generic (\S+) (.*)$`)
	for _, l := range lines {
		if m := secretRe.FindStringSubmatch(l); m != nil {
			secrets[m[1]] = map[string]bool{}
			for _, lit := range regexp.MustCompile(`--from-literal=([^=]+)=`).FindAllStringSubmatch(m[2], -1) {
				secrets[m[1]][lit[1]] = true
			}
		}
		if rest, ok := strings.CutPrefix(l, "docker push "); ok {
			image = rest
		}
		if rest, ok := strings.CutPrefix(l, "kubectl -n llm rollout status deploy/"); ok {
			deployName = rest
		}
		if rest, ok := strings.CutPrefix(l, "helm install "); ok {
			f := strings.Fields(rest)
			if len(f) < 4 || f[0] != "rg" || f[1] != "deploy/helm/respgate" || f[2] != "--namespace" || f[3] != "llm" {
				t.Fatalf("helm install %s: the test renders release rg of deploy/helm/respgate in llm", rest)
			}
			for i := 4; i < len(f); i += 2 {
				if f[i] != "--set" || i+1 >= len(f) {
					t.Fatalf("helm install: unexpected %q (the test knows --set only)", f[i])
				}
				if err := strvals.ParseInto(f[i+1], vals); err != nil {
					t.Fatalf("--set %s: %v", f[i+1], err)
				}
			}
		}
	}
	if len(secrets) == 0 || image == "" || deployName == "" || len(vals) == 0 {
		t.Fatalf("the guide's install lacks a step: secrets %v, image %q, deployment %q, values %v", secrets, image, deployName, vals)
	}
	out, err := render(t, vals)
	if err != nil {
		t.Fatalf("render with the guide's values: %v", err)
	}
	r := decode(t, out)
	if r.deploy == nil || r.deploy.Name != deployName {
		t.Fatalf("the guide waits for deploy/%s; the chart made %v", deployName, r.deploy)
	}
	pods := map[string]*corev1.PodSpec{"Deployment": &r.deploy.Spec.Template.Spec}
	if r.job != nil {
		pods["migration Job"] = &r.job.Spec.Template.Spec
	}
	for what, pod := range pods {
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			if c.Image != image {
				t.Errorf("%s: container %s runs %s, the guide pushed %s", what, c.Name, c.Image, image)
			}
			for _, e := range c.Env {
				if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil && (ref.SecretKeyRef.Optional == nil || !*ref.SecretKeyRef.Optional) {
					if !secrets[ref.SecretKeyRef.Name][ref.SecretKeyRef.Key] {
						t.Errorf("%s: %s reads key %q of Secret %q, which the guide does not create (it creates %v)", what, e.Name, ref.SecretKeyRef.Key, ref.SecretKeyRef.Name, secrets)
					}
				}
			}
		}
		for _, v := range pod.Volumes {
			if v.Secret != nil && (v.Secret.Optional == nil || !*v.Secret.Optional) && secrets[v.Secret.SecretName] == nil {
				t.Errorf("%s: volume %s mounts Secret %q, which the guide does not create", what, v.Name, v.Secret.SecretName)
			}
		}
	}
	if r.monitor == nil {
		t.Errorf("the guide sets serviceMonitor.enabled=true; the chart made no ServiceMonitor")
	}
}
