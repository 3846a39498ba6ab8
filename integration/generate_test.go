package integration

import (
	"strings"
	"testing"

	"github.com/respgate/respgate/store"
)

// "generate": false over HTTP (docs/clients.md, "Preparing a turn without output"): the request is
// validated and its history loaded like any turn's, no model runs, and the answer is a completed
// response with empty output. store:true makes it continuable from anywhere; store:false is a dry
// run whose id continues nothing.
func TestHTTPGenerateFalseRunsNoModelAndIsContinuable(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		before := len(g.UpstreamRequests())
		warm := g.create(t, `{"model":"`+harmony+`","generate":false,"instructions":"be brief","input":"remember: owls hoot"}`)
		if warm.Status != "completed" || len(warm.Output) != 0 || warm.Usage.TotalTokens != 0 {
			t.Fatalf("warm-up: status %s, %d output items, usage %+v", warm.Status, len(warm.Output), warm.Usage)
		}
		// Streamed: response.created then response.completed, nothing in between.
		s := g.stream(t, `{"model":"`+harmony+`","generate":false,"stream":true,"input":"remember: bees dance"}`)
		var types []string
		for _, ev := range s.events {
			types = append(types, ev.Type)
		}
		if got := strings.Join(types, ","); got != "response.created,response.completed" || len(s.final.Output) != 0 {
			t.Fatalf("streamed warm-up events %s, output %d", got, len(s.final.Output))
		}
		if n := len(g.UpstreamRequests()) - before; n != 0 {
			t.Fatalf("generate:false sent %d requests upstream", n)
		}
		// Stored: readable and continued like any response; the model sees its input once.
		got, err := g.client.Responses.Get(t.Context(), warm.ID, responsesGetParams())
		if err != nil || got.Status != "completed" {
			t.Fatalf("GET the warm-up: %v", err)
		}
		next := g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+warm.ID+`","input":"what do you know?"}`)
		if !strings.Contains(next.OutputText(), "Facts: owls hoot.") {
			t.Fatalf("the continuation did not get the warm-up's input: %q", next.OutputText())
		}
		reqs := g.UpstreamRequests()
		if c := strings.Count(string(reqs[len(reqs)-1]), "owls hoot"); c != 1 {
			t.Fatalf("the warm-up's input reached the model %d times", c)
		}
		// store:false over HTTP is a dry run: validated and answered, but nothing keeps it.
		dry := g.create(t, `{"model":"`+harmony+`","generate":false,"store":false,"input":"x"}`)
		if dry.Status != "completed" {
			t.Fatalf("dry run status %s", dry.Status)
		}
		if status, _, _ := rawDo(t, "GET", g.URL+"/responses/"+dry.ID, "", "Authorization", "Bearer test-key"); status != 404 {
			t.Fatalf("GET a store:false warm-up: %d", status)
		}
		status, body, _ := rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","previous_response_id":"`+dry.ID+`","input":"y"}`, "Authorization", "Bearer test-key")
		if _, code, _, _ := envelope(t, body); status != 400 || code != "previous_response_not_found" {
			t.Fatalf("continuing a store:false warm-up over HTTP: %d %s", status, body)
		}
	})
}

func TestHTTPGenerateFalseIsValidatedLikeAnyRequest(t *testing.T) {
	g := newGateway(t, nil)
	for _, tc := range []struct{ body, code, param string }{
		{`{"model":"` + harmony + `","generate":"no","input":"x"}`, "invalid_type", "generate"},
		{`{"model":"` + harmony + `","generate":false,"background":true,"input":"x"}`, "unsupported_parameter", "generate"},
		{`{"model":"` + harmony + `","generate":false,"previous_response_id":"resp_missing","input":"x"}`, "previous_response_not_found", "previous_response_id"},
		{`{"generate":false,"input":"x"}`, "missing_required_parameter", "model"},
	} {
		status, body, _ := rawDo(t, "POST", g.URL+"/responses", tc.body, "Authorization", "Bearer test-key")
		if _, code, param, _ := envelope(t, body); status != 400 || code != tc.code || param != tc.param {
			t.Errorf("%s: %d %s", tc.body, status, body)
		}
	}
	if n := len(g.UpstreamRequests()); n != 0 {
		t.Fatalf("%d upstream requests", n)
	}
}
