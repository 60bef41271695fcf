package console

import "testing"

func TestLineOf(t *testing.T) {
	text := "{\n  \"family\": \"x\",\n  \"containerDefinitions\": [\n    {\n      \"name\": \"a\"\n    },\n    {\n      \"name\": \"b\",\n      \"memory\": 5\n    }\n  ]\n}"
	for path, want := range map[string]int{
		"family":                         2,
		"containerDefinitions":           3,
		"containerDefinitions[0]":        4,
		"containerDefinitions[1].name":   8,
		"containerDefinitions[1].memory": 9,
		"containerDefinitions.memory":    9, // Go's paths have no indexes
		"containerDefinitions[1].image":  7, // absent: its container
		"nosuch":                         0,
	} {
		if got := lineOf(text, path); got != want {
			t.Errorf("lineOf(%q) = %d, want %d", path, got, want)
		}
	}
}

func TestCheckRegisterJSON(t *testing.T) {
	for text, want := range map[string]string{
		"":                          "json: paste",
		`{"family": "x"`:            "json: the text ends",
		`{"family": "x",}`:          "json: line 1",
		`{"family": "x", "zz": 1}`:  "zz: not a field",
		`{"family": 5}`:             "family: must be string",
		`{"family": "x"} {}`:        "json: line 1: text after",
		"{\n\"family\": \"x\"\n}\n": "",
	} {
		_, err := checkRegisterJSON(text)
		if got := ""; err != nil {
			got = err.Error()
			if want == "" || len(got) < len(want) || got[:len(want)] != want {
				t.Errorf("checkRegisterJSON(%q) = %q, want %q…", text, got, want)
			}
		} else if want != "" {
			t.Errorf("checkRegisterJSON(%q) passed, want %q…", text, want)
		}
	}
	if f := fieldOf("containerDefinitions[0].image: is required"); f != "containerDefinitions[0].image" {
		t.Errorf("fieldOf = %q", f)
	}
	if f := fieldOf("Cluster not found."); f != "" {
		t.Errorf("fieldOf = %q", f)
	}
}
