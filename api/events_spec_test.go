package api

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// specScenarioEvents reads the event feed of the commands the scenario ran
// before (every line validated against FeedEvent) and its refusals.
func specScenarioEvents(t *testing.T, c *specClient) {
	r := c.do(t, specReq{method: "GET", path: "/v1/events?follow=false", want: 200})
	types := specEventTypes(r.events)
	for _, want := range []string{"created", "started", "exited", "end"} {
		if !slices.Contains(types, want) {
			t.Errorf("feed %v lacks %q", types, want)
		}
	}
	last := r.events[len(r.events)-1]
	if last["type"] != "end" || last["reason"] != "caught_up" {
		t.Errorf("last line %v", last)
	}
	next := last["next_cursor"].(string)
	// Nothing new: a filtered feed from the end waits out its window.
	r = c.do(t, specReq{method: "GET", path: "/v1/events?type=exited&max_wait=0.2&cursor=" + url.QueryEscape(next), want: 200})
	if types := strings.Join(specEventTypes(r.events), ","); strings.Trim(strings.ReplaceAll(types, "heartbeat", ""), ",") != "end" || r.events[len(r.events)-1]["reason"] != "max_wait" {
		t.Errorf("a caught-up feed sent %v", types) // heartbeats every 50 ms here
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/events?cursor=" + url.QueryEscape(wire.FeedCursor{Instance: "0123456789abcdef", Seq: 1}.String()), want: 409})
	if r.errorCode(t) != "stale_cursor" {
		t.Errorf("409 code %q", r.errorCode(t))
	}
	r = c.do(t, specReq{method: "GET", path: "/v1/events?type=bogus", want: 400})
	if r.errorCode(t) != "invalid_request" {
		t.Errorf("400 code %q", r.errorCode(t))
	}
}
