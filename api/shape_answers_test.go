package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// shapeCase is one request body (or attach frame) and the answer it gets:
// "201", "400 <code> <message>" for a route (POST /v1/commands, or
// .../{id}/stdin, signal, resize of one terminal command); "ok" or
// "<code> <message>" for a frame on that command's attachment.
type shapeCase struct{ route, body, want string }

var shapeCases = []shapeCase{
	{"create", `{}`, `400 invalid_request argv must not be empty`},
	{"create", `null`, `400 invalid_request argv must not be empty`},
	{"create", `[]`, `400 invalid_request the body must be a JSON object, not array`},
	{"create", `5`, `400 invalid_request the body must be a JSON object, not number`},
	{"create", `"x"`, `400 invalid_request the body must be a JSON object, not string`},
	{"create", `{"argv":["true"]} {}`, `400 invalid_request the body holds more than one JSON value`},
	{"create", `{"argv":["true"]`, `400 invalid_request invalid JSON: the body ends early`},
	{"create", `{"argv":["true"]}x`, `400 invalid_request the body holds more than one JSON value`},
	{"create", `{"argv":["true"]}`, `201`},
	{"create", `{"command":"true"}`, `201`},
	{"create", `{"command":""}`, `400 invalid_request argv must not be empty`},
	{"create", `{"command":null}`, `400 invalid_request argv must not be empty`},
	{"create", `{"command":5}`, `400 invalid_request field "command" must be a string, not a number`},
	{"create", `{"argv":["true"],"command":"true"}`, `400 invalid_request give either argv or command, not both`},
	{"create", `{"argv":["true"],"command":null}`, `201`},
	{"create", `{"argv":null,"command":"true"}`, `201`},
	{"create", `{"argv":[],"command":"true"}`, `400 invalid_request give either argv or command, not both`},
	{"create", `{"argv":[]}`, `400 invalid_request argv must not be empty`},
	{"create", `{"argv":[""]}`, `400 invalid_request argv[0] must not be empty`},
	{"create", `{"argv":[null]}`, `400 invalid_request argv[0] must not be empty`},
	{"create", `{"argv":[1]}`, `400 invalid_request field "argv" must be a string, not a number`},
	{"create", `{"argv":"true"}`, `400 invalid_request field "argv" must be an array, not a string`},
	{"create", `{"argv":["true"],"timeout":0}`, `400 invalid_request timeout must be > 0 seconds`},
	{"create", `{"argv":["true"],"timeout":null}`, `201`},
	{"create", `{"argv":["true"],"timeout":-1}`, `400 invalid_request timeout must be > 0 seconds`},
	{"create", `{"argv":["true"],"timeout":"5"}`, `400 invalid_request field "timeout" must be a number, not a string`},
	{"create", `{"argv":["true"],"timeout":1e400}`, `400 invalid_request field "timeout" must be a number, not 1e400`},
	{"create", `{"argv":["true"],"timeout":2.5}`, `201`},
	{"create", `{"argv":["true"],"command_id":""}`, `400 invalid_request command_id must be a UUID (got "")`},
	{"create", `{"argv":["true"],"command_id":null}`, `201`},
	{"create", `{"argv":["true"],"command_id":"x"}`, `400 invalid_request command_id must be a UUID (got "x")`},
	{"create", `{"argv":["true"],"command_id":5}`, `400 invalid_request field "command_id" must be a string, not a number`},
	{"create", `{"argv":["true"],"command_id":"5D1C7F9E-3A4B-4C1D-9E2F-0A1B2C3D4E5F"}`, `201`},
	{"create", `{"argv":["true"],"envs":null}`, `201`},
	{"create", `{"argv":["true"],"envs":{}}`, `201`},
	{"create", `{"argv":["true"],"envs":{"A":""}}`, `201`},
	{"create", `{"argv":["true"],"envs":{"A":null}}`, `400 invalid_request every value of field "envs" must be a string; one is null (names and values are not repeated here)`},
	{"create", `{"argv":["true"],"envs":{"A":1}}`, `400 invalid_request every value of field "envs" must be a string; one is a number (names and values are not repeated here)`},
	{"create", `{"argv":["true"],"envs":[]}`, `400 invalid_request every value of field "envs" must be an object; one is an array (names and values are not repeated here)`},
	{"create", `{"argv":["true"],"envs":{"A":"1","A":"2"}}`, `400 invalid_request field "envs" gives one key more than once (names are not repeated here)`},
	{"create", `{"argv":["true"],"envs":{"A":null,"A":"x"}}`, `400 invalid_request field "envs" gives one key more than once (names are not repeated here)`},
	{"create", `{"argv":["true"],"envs":{"A":null},"timeout":"x"}`, `400 invalid_request field "timeout" must be a number, not a string`},
	{"create", `{"argv":["true"],"envs":{"A":null},"command_id":""}`, `400 invalid_request every value of field "envs" must be a string; one is null (names and values are not repeated here)`},
	{"create", `{"argv":["true"],"envs":{"A=B":"x"}}`, `400 invalid_request an envs name must not contain '=' or NUL (a NAME=value given as the name?); env names and values are never echoed`},
	{"create", `{"argv":["true"],"envs":{"":"x"}}`, `400 invalid_request env names must not be empty`},
	{"create", `{"argv":["true"],"envs":{"A":{"b":1,"b":2}}}`, `400 invalid_request every value of field "envs" must be a string; one is an object (names and values are not repeated here)`},
	{"create", `{"argv":["true"],"cwd":null}`, `201`},
	{"create", `{"argv":["true"],"cwd":"rel"}`, `400 invalid_request cwd must be an absolute path (got "rel")`},
	{"create", `{"argv":["true"],"cwd":5}`, `400 invalid_request field "cwd" must be a string, not a number`},
	{"create", `{"argv":["true"],"cwd":"/"}`, `201`},
	{"create", `{"argv":["true"],"stdin":null}`, `201`},
	{"create", `{"argv":["true"],"stdin":"yes"}`, `400 invalid_request field "stdin" must be a boolean, not a string`},
	{"create", `{"argv":["true"],"stdin":true}`, `201`},
	{"create", `{"argv":["true"],"pty":null}`, `201`},
	{"create", `{"argv":["true"],"pty":{"cols":80,"rows":24}}`, `201`},
	{"create", `{"argv":["true"],"pty":{"cols":80}}`, `400 invalid_request pty cols and rows must be at least 1 (got 80 x 0); more than 1000 is taken as 1000`},
	{"create", `{"argv":["true"],"pty":{}}`, `400 invalid_request pty cols and rows must be at least 1 (got 0 x 0); more than 1000 is taken as 1000`},
	{"create", `{"argv":["true"],"pty":{"cols":0,"rows":24}}`, `400 invalid_request pty cols and rows must be at least 1 (got 0 x 24); more than 1000 is taken as 1000`},
	{"create", `{"argv":["true"],"pty":{"cols":80,"rows":24,"term":null}}`, `201`},
	{"create", `{"argv":["true"],"pty":{"cols":80,"rows":24,"term":"vt100"}}`, `201`},
	{"create", `{"argv":["true"],"pty":{"cols":80,"rows":24,"term":""}}`, `201`},
	{"create", `{"argv":["true"],"pty":{"cols":80,"rows":24,"term":"a b"}}`, `400 invalid_request pty term must be 1 to 64 printable ASCII characters without spaces or '=' (got "a b")`},
	{"create", `{"argv":["true"],"pty":[]}`, `400 invalid_request field "pty" must be an object, not an array`},
	{"create", `{"argv":["true"],"pty":5}`, `400 invalid_request field "pty" must be an object, not a number`},
	{"create", `{"argv":["true"],"pty":{"Cols":80,"ROWS":24}}`, `400 invalid_request unknown field "pty.Cols"`},
	{"create", `{"argv":["true"],"pty":{"cols":80,"rows":24,"extra":1}}`, `400 invalid_request unknown field "pty.extra"`},
	{"create", `{"argv":["true"],"pty":{"cols":80,"cols":81,"rows":24}}`, `400 invalid_request field "pty.cols" is given more than once`},
	{"create", `{"argv":["true"],"pty":{"cols":80.0,"rows":24}}`, `400 invalid_request field "pty.cols" must be an integer written without a fraction part or exponent, not 80.0`},
	{"create", `{"argv":["true"],"pty":{"cols":null,"rows":24}}`, `400 invalid_request pty cols and rows must be at least 1 (got 0 x 24); more than 1000 is taken as 1000`},
	{"create", `{"argv":["true"],"pty":{"cols":"80","rows":24}}`, `400 invalid_request field "pty.cols" must be a whole number, not a string`},
	{"create", `{"argv":["true"],"ARGV":["x"]}`, `400 invalid_request unknown field "ARGV"`},
	{"create", `{"Argv":["true"]}`, `400 invalid_request unknown field "Argv"`},
	{"create", `{"argv":["true"],"argv":["x"]}`, `400 invalid_request field "argv" is given more than once`},
	{"create", `{"argv":["true"],"bogus":1}`, `400 invalid_request unknown field "bogus"`},
	{"create", `{"argv":["true"],"Pty":{"cols":80,"rows":24}}`, `400 invalid_request unknown field "Pty"`},
	{"create", `{"argv":["true"],"Command_ID":null}`, `400 invalid_request unknown field "Command_ID"`},
	{"stdin", `{}`, `202`},
	{"stdin", `null`, `202`},
	{"stdin", `[]`, `400 invalid_request the body must be a JSON object, not array`},
	{"stdin", `{"data":"x"}`, `202`},
	{"stdin", `{"data":null}`, `202`},
	{"stdin", `{"data":"aGk=","encoding":"base64"}`, `202`},
	{"stdin", `{"data":"%%","encoding":"base64"}`, `400 invalid_request data is not valid base64: illegal base64 data at input byte 0`},
	{"stdin", `{"data":"x","encoding":"utf-8"}`, `202`},
	{"stdin", `{"data":"x","encoding":"text"}`, `202`},
	{"stdin", `{"data":"x","encoding":"UTF-16"}`, `400 invalid_request encoding must be "base64", "utf-8" or "text" (or absent: utf-8), not "UTF-16"`},
	{"stdin", `{"data":"x","encoding":null}`, `202`},
	{"stdin", `{"data":"x","encoding":""}`, `202`},
	{"stdin", `{"eof":"yes"}`, `400 invalid_request field "eof" must be a boolean, not a string`},
	{"stdin", `{"eof":null}`, `202`},
	{"stdin", `{"Data":"x"}`, `400 invalid_request unknown field "Data"`},
	{"stdin", `{"data":1}`, `400 invalid_request field "data" must be a string, not a number`},
	{"stdin", `{"data":"x","data":"y"}`, `400 invalid_request field "data" is given more than once`},
	{"stdin", `{"data":"x","bogus":1}`, `400 invalid_request unknown field "bogus"`},
	{"stdin", `{"data":"x","type":"stdin"}`, `400 invalid_request unknown field "type"`},
	{"stdin", `{"data":"x"} 1`, `400 invalid_request the body holds more than one JSON value`},
	{"signal", `{}`, `400 invalid_request field "signal" is required`},
	{"signal", `null`, `400 invalid_request field "signal" is required`},
	{"signal", `[]`, `400 invalid_request the body must be a JSON object, not array`},
	{"signal", `{"signal":null}`, `400 invalid_request field "signal" is required`},
	{"signal", `{"signal":""}`, `400 invalid_request unknown signal ""`},
	{"signal", `{"signal":"SIGWINCH"}`, `200`},
	{"signal", `{"signal":"winch"}`, `200`},
	{"signal", `{"signal":28}`, `200`},
	{"signal", `{"signal":"28"}`, `200`},
	{"signal", `{"signal":0}`, `400 invalid_request signal number 0 is out of range 1..64`},
	{"signal", `{"signal":65}`, `400 invalid_request signal number 65 is out of range 1..64`},
	{"signal", `{"signal":-1}`, `400 invalid_request signal number -1 is out of range 1..64`},
	{"signal", `{"signal":"-1"}`, `400 invalid_request signal number -1 is out of range 1..64`},
	{"signal", `{"signal":2.0}`, `400 invalid_request field "signal" must be an integer written without a fraction part or exponent, not 2.0`},
	{"signal", `{"signal":2.5}`, `400 invalid_request field "signal" must be a signal name like "SIGINT" or a whole number, not 2.5`},
	{"signal", `{"signal":1e1}`, `400 invalid_request field "signal" must be an integer written without a fraction part or exponent, not 1e1`},
	{"signal", `{"signal":1E1}`, `400 invalid_request field "signal" must be an integer written without a fraction part or exponent, not 1E1`},
	{"signal", `{"signal":true}`, `400 invalid_request field "signal" must be a signal name like "SIGINT" or a number`},
	{"signal", `{"signal":[]}`, `400 invalid_request field "signal" must be a signal name like "SIGINT" or a number`},
	{"signal", `{"signal":{}}`, `400 invalid_request field "signal" must be a signal name like "SIGINT" or a number`},
	{"signal", `{"signal":{"a":1,"a":2}}`, `400 invalid_request field "signal" must be a signal name like "SIGINT" or a number`},
	{"signal", `{"signal":99999999999999999999}`, `400 invalid_request field "signal" must be a signal name like "SIGINT" or a whole number, not 99999999999999999999`},
	{"signal", `{"signal":-99999999999999999999}`, `400 invalid_request field "signal" must be a signal name like "SIGINT" or a whole number, not -99999999999999999999`},
	{"signal", `{"signal":"BOGUS"}`, `400 invalid_request unknown signal "BOGUS"`},
	{"signal", `{"Signal":28}`, `400 invalid_request unknown field "Signal"`},
	{"signal", `{"signal":28,"signal":28}`, `400 invalid_request field "signal" is given more than once`},
	{"signal", `{"signal":28,"x":1}`, `400 invalid_request unknown field "x"`},
	{"signal", `{"signal":" 28"}`, `400 invalid_request unknown signal " 28"`},
	{"signal", `{"signal":28.5e1}`, `400 invalid_request field "signal" must be an integer written without a fraction part or exponent, not 28.5e1`},
	{"signal", `{"signal":-0}`, `400 invalid_request signal number 0 is out of range 1..64`},
	{"resize", `{}`, `400 invalid_request fields "cols" and "rows" are required`},
	{"resize", `null`, `400 invalid_request fields "cols" and "rows" are required`},
	{"resize", `[]`, `400 invalid_request the body must be a JSON object, not array`},
	{"resize", `{"cols":80}`, `400 invalid_request fields "cols" and "rows" are required`},
	{"resize", `{"rows":24}`, `400 invalid_request fields "cols" and "rows" are required`},
	{"resize", `{"cols":null,"rows":24}`, `400 invalid_request fields "cols" and "rows" are required`},
	{"resize", `{"cols":80,"rows":24}`, `200`},
	{"resize", `{"cols":0,"rows":24}`, `400 invalid_request cols and rows must be at least 1 (got 0 x 24); more than 1000 is taken as 1000`},
	{"resize", `{"cols":2000,"rows":24}`, `200`},
	{"resize", `{"cols":80.0,"rows":24}`, `400 invalid_request field "cols" must be an integer written without a fraction part or exponent, not 80.0`},
	{"resize", `{"cols":80.5,"rows":24}`, `400 invalid_request field "cols" must be a whole number, not 80.5`},
	{"resize", `{"cols":"80","rows":24}`, `400 invalid_request field "cols" must be a whole number, not a string`},
	{"resize", `{"Cols":80,"rows":24}`, `400 invalid_request unknown field "Cols"`},
	{"resize", `{"cols":80,"rows":24,"rows":25}`, `400 invalid_request field "rows" is given more than once`},
	{"resize", `{"cols":80,"rows":24,"x":1}`, `400 invalid_request unknown field "x"`},
	{"resize", `{"cols":-1,"rows":24}`, `400 invalid_request cols and rows must be at least 1 (got -1 x 24); more than 1000 is taken as 1000`},
	{"resize", `{"cols":99999999999999999999,"rows":24}`, `400 invalid_request field "cols" must be a whole number within range, not 99999999999999999999`},
	{"resize", `{"cols":80,"rows":24,"type":"resize"}`, `400 invalid_request unknown field "type"`},
	{"frame", `not json`, `invalid_request invalid JSON at byte 2: invalid character 'o' in literal null (expecting 'u')`},
	{"frame", `[1]`, `invalid_request the frame must be a JSON object, not array`},
	{"frame", `{"type":"kill"`, `invalid_request invalid JSON: the frame ends early`},
	{"frame", `{"type":"kill"} {"type":"kill"}`, `invalid_request the frame holds more than one JSON value`},
	{"frame", `{}`, `invalid_request field "type" is required: "stdin", "signal", "kill" or "resize"`},
	{"frame", `{"type":""}`, `invalid_request field "type" is required: "stdin", "signal", "kill" or "resize"`},
	{"frame", `{"type":null}`, `invalid_request field "type" is required: "stdin", "signal", "kill" or "resize"`},
	{"frame", `{"type":5}`, `invalid_request field "type" must be a string, not a number`},
	{"frame", `{"type":"launch"}`, `invalid_request unknown frame type "launch"; expected "stdin", "signal", "kill" or "resize"`},
	{"frame", `{"TYPE":"stdin","data":"x"}`, `invalid_request unknown field "TYPE"`},
	{"frame", `{"type":"stdin","type":"stdin","data":"x"}`, `invalid_request field "type" is given more than once`},
	{"frame", `{"type":"stdin"}`, `ok`},
	{"frame", `{"type":"stdin","data":"x"}`, `ok`},
	{"frame", `{"type":"stdin","data":null}`, `ok`},
	{"frame", `{"type":"stdin","data":"aGk=","encoding":"base64"}`, `ok`},
	{"frame", `{"type":"stdin","data":"%%","encoding":"base64"}`, `invalid_request data is not valid base64: illegal base64 data at input byte 0`},
	{"frame", `{"type":"stdin","data":"x","encoding":"UTF-16"}`, `invalid_request encoding must be "base64", "utf-8" or "text" (or absent: utf-8), not "UTF-16"`},
	{"frame", `{"type":"stdin","data":1}`, `invalid_request field "data" must be a string, not a number`},
	{"frame", `{"type":"stdin","Data":"x"}`, `invalid_request unknown field "Data"`},
	{"frame", `{"type":"stdin","data":"x","data":"y"}`, `invalid_request field "data" is given more than once`},
	{"frame", `{"type":"stdin","signal":"INT"}`, `invalid_request unknown field "signal"`},
	{"frame", `{"type":"stdin","cols":"x"}`, `invalid_request unknown field "cols"`},
	{"frame", `{"type":"stdin","eof":"yes"}`, `invalid_request field "eof" must be a boolean, not a string`},
	{"frame", `{"type":"stdin","data":"x","bogus":1}`, `invalid_request unknown field "bogus"`},
	{"frame", `{"type":"signal"}`, `invalid_request field "signal" is required`},
	{"frame", `{"type":"signal","signal":null}`, `invalid_request field "signal" is required`},
	{"frame", `{"type":"signal","signal":""}`, `invalid_request unknown signal ""`},
	{"frame", `{"type":"signal","signal":"SIGWINCH"}`, `ok`},
	{"frame", `{"type":"signal","signal":28}`, `ok`},
	{"frame", `{"type":"signal","signal":"28"}`, `ok`},
	{"frame", `{"type":"signal","signal":0}`, `invalid_request signal number 0 is out of range 1..64`},
	{"frame", `{"type":"signal","signal":999}`, `invalid_request signal number 999 is out of range 1..64`},
	{"frame", `{"type":"signal","signal":2.0}`, `invalid_request field "signal" must be an integer written without a fraction part or exponent, not 2.0`},
	{"frame", `{"type":"signal","signal":2.5}`, `invalid_request field "signal" must be a signal name like "SIGINT" or a whole number, not 2.5`},
	{"frame", `{"type":"signal","signal":1e1}`, `invalid_request field "signal" must be an integer written without a fraction part or exponent, not 1e1`},
	{"frame", `{"type":"signal","signal":true}`, `invalid_request field "signal" must be a signal name like "SIGINT" or a number`},
	{"frame", `{"type":"signal","signal":{}}`, `invalid_request field "signal" must be a signal name like "SIGINT" or a number`},
	{"frame", `{"type":"signal","signal":99999999999999999999}`, `invalid_request field "signal" must be a signal name like "SIGINT" or a whole number, not 99999999999999999999`},
	{"frame", `{"type":"signal","signal":"BOGUS"}`, `invalid_request unknown signal "BOGUS"`},
	{"frame", `{"type":"signal","Signal":28}`, `invalid_request unknown field "Signal"`},
	{"frame", `{"type":"signal","signal":28,"signal":28}`, `invalid_request field "signal" is given more than once`},
	{"frame", `{"type":"signal","data":"x"}`, `invalid_request unknown field "data"`},
	{"frame", `{"type":"signal","signal":28,"cols":"x"}`, `invalid_request unknown field "cols"`},
	{"frame", `{"type":"resize"}`, `invalid_request fields "cols" and "rows" are required`},
	{"frame", `{"type":"resize","cols":80}`, `invalid_request fields "cols" and "rows" are required`},
	{"frame", `{"type":"resize","cols":null,"rows":24}`, `invalid_request fields "cols" and "rows" are required`},
	{"frame", `{"type":"resize","cols":80,"rows":24}`, `ok`},
	{"frame", `{"type":"resize","cols":0,"rows":24}`, `invalid_request cols and rows must be at least 1 (got 0 x 24); more than 1000 is taken as 1000`},
	{"frame", `{"type":"resize","cols":80.0,"rows":24}`, `invalid_request field "cols" must be an integer written without a fraction part or exponent, not 80.0`},
	{"frame", `{"type":"resize","cols":"80","rows":24}`, `invalid_request field "cols" must be a whole number, not a string`},
	{"frame", `{"type":"resize","COLS":80,"rows":24}`, `invalid_request unknown field "COLS"`},
	{"frame", `{"type":"resize","cols":80,"cols":81,"rows":24}`, `invalid_request field "cols" is given more than once`},
	{"frame", `{"type":"resize","signal":2}`, `invalid_request unknown field "signal"`},
	{"frame", `{"type":"resize","cols":80,"rows":24,"data":"x"}`, `invalid_request unknown field "data"`},
	{"frame", `{"type":"resize","cols":80,"rows":24,"type":"resize"}`, `invalid_request field "type" is given more than once`},
	{"frame", `{"type":"stdin","data":"x","eof":null}`, `ok`},
	{"frame", `{"TYPE":"kill"}`, `invalid_request unknown field "TYPE"`},
	{"frame", `{"type":"Kill"}`, `invalid_request unknown frame type "Kill"; expected "stdin", "signal", "kill" or "resize"`},
	{"frame", `{"type":"kill","cols":1}`, `invalid_request unknown field "cols"`},
	{"frame", `{"type":"kill","signal":"INT"}`, `invalid_request unknown field "signal"`},
	{"frame", `{"type":"kill","Type":"kill"}`, `invalid_request unknown field "Type"`},
}

// TestRequestShapeAnswers pins the answer to each body of a corpus of
// request bodies and attach frames, good and bad, against one terminal
// command (cat): the strictness of the request shapes (unknown,
// case-variant and repeated keys, nulls, types) and their messages.
func TestRequestShapeAnswers(t *testing.T) {
	ts := newTestServer(t, atQuietAPI)
	term := ptCreate(t, ts, []string{"cat"}, 80, 24, "")
	c := atDial(t, ts, term.CommandID, "")
	const sentinel = `{"type":"sentinel"}`
	answer := func(route, body string) string {
		if route == "frame" {
			c.send(body)
			c.send(sentinel)
			got := "ok"
			for {
				ev := c.read()
				if ev.Type != "error" {
					continue
				}
				if strings.Contains(ev.Error.Message, `"sentinel"`) {
					return got
				}
				got = ev.Error.Code + " " + ev.Error.Message
			}
		}
		url := ts.URL + "/v1/commands"
		if route != "create" {
			url += "/" + term.CommandID + "/" + route
		}
		code, b := atDo(t, "POST", url, body, nil)
		if code < 300 {
			return fmt.Sprint(code)
		}
		var eb struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(b, &eb)
		return fmt.Sprintf("%d %s %s", code, eb.Error.Code, eb.Error.Message)
	}
	for _, tc := range shapeCases {
		if got := answer(tc.route, tc.body); got != tc.want {
			t.Errorf("%s %s:\n got %s\nwant %s", tc.route, tc.body, got, tc.want)
		}
	}
	if len(shapeCases) == 0 {
		t.Fatal("no cases")
	}
}
