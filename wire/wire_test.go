package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestSignalDecodesNamesAndNumbers(t *testing.T) {
	for in, want := range map[string]Signal{`"SIGINT"`: "SIGINT", `"int"`: "int", `2`: "2", `15`: "15"} {
		var r SignalRequest
		if err := json.Unmarshal([]byte(`{"signal":`+in+`}`), &r); err != nil || r.Signal != want {
			t.Errorf("signal %s: got %q, %v; want %q", in, r.Signal, err, want)
		}
	}
	for _, in := range []string{`true`, `{}`, `[2]`, `2.5`} {
		var r SignalRequest
		if err := json.Unmarshal([]byte(`{"signal":`+in+`}`), &r); err == nil {
			t.Errorf("signal %s accepted as %q", in, r.Signal)
		}
	}
}

func TestClientFrameEncoding(t *testing.T) {
	for _, tc := range []struct {
		f    ClientFrame
		want string
	}{
		{ClientFrame{Type: FrameStdin, EOF: true}, `{"type":"stdin","data":"","eof":true}`},
		{ClientFrame{Type: FrameStdin, Data: "aGk=", Encoding: EncodingBase64}, `{"type":"stdin","data":"aGk=","encoding":"base64"}`},
		{ClientFrame{Type: FrameSignal, Signal: "SIGINT"}, `{"type":"signal","signal":"SIGINT"}`},
		{ClientFrame{Type: FrameKill}, `{"type":"kill"}`},
		{ClientFrame{Type: FrameResize, Cols: 80, Rows: 24}, `{"type":"resize","cols":80,"rows":24}`},
	} {
		got, err := json.Marshal(tc.f)
		if err != nil || string(got) != tc.want {
			t.Errorf("%+v: got %s, %v; want %s", tc.f, got, err, tc.want)
		}
	}
}

func TestCreateRequestSendsOnlyWhatIsSet(t *testing.T) {
	got, _ := json.Marshal(CreateRequest{Argv: []string{"true"}})
	if string(got) != `{"argv":["true"]}` {
		t.Errorf("got %s", got)
	}
}

func TestEventBytes(t *testing.T) {
	text := Event{Type: EventOutput, Data: "hé"}
	bin := Event{Type: EventOutput, Data: "/w==", Encoding: EncodingBase64}
	if b, err := text.Bytes(); err != nil || string(b) != "hé" {
		t.Errorf("text: %q %v", b, err)
	}
	if b, err := bin.Bytes(); err != nil || string(b) != "\xff" {
		t.Errorf("base64: %q %v", b, err)
	}
	if _, err := (&Event{Data: "!!", Encoding: EncodingBase64}).Bytes(); err == nil {
		t.Error("bad base64 accepted")
	}
	if StateRunning.Finished() || !StateTimedOut.Finished() || State("").Finished() {
		t.Error("Finished")
	}
}

// TestSignalErrorIsEncodingJSONs: a value that is no signal is refused as
// encoding/json refuses a mistyped value, so that a server or client can
// name the member ("signal", once: the decoder adds the path) and the value
// ("number 2.0") as it does for any other field.
func TestSignalErrorIsEncodingJSONs(t *testing.T) {
	for in, want := range map[string]string{`2.0`: "number 2.0", `1e1`: "number 1e1", `99999999999999999999`: "number 99999999999999999999",
		`true`: "bool", `{"a":1}`: "object", `[2]`: "array"} {
		var r SignalRequest
		err := json.Unmarshal([]byte(`{"signal":`+in+`}`), &r)
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || te.Field != "signal" || te.Value != want || te.Type != reflect.TypeFor[Signal]() {
			t.Errorf("signal %s: got %#v; want an UnmarshalTypeError of field \"signal\", value %q", in, err, want)
		}
	}
}
