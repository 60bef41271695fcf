package fleet

import (
	"encoding/base64"
	"strings"

	"github.com/capstanhq/capstan/internal/fault"
)

// page is a validated maxResults/nextToken pair. Tokens are opaque to
// callers: the last key returned, bound to the list they came from.
type Page struct {
	Limit int
	After string
}

func NewPage(maxResults *int32, nextToken, scope string, def int) (Page, error) {
	p := Page{Limit: def}
	if maxResults != nil {
		if *maxResults < 1 || *maxResults > 100 {
			return p, fault.Invalid("maxResults", "must be between 1 and 100 (got %d)", *maxResults)
		}
		p.Limit = int(*maxResults)
	}
	if nextToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(nextToken)
		if err != nil || !strings.HasPrefix(string(b), scope+"\x00") {
			return p, fault.Invalid("nextToken", "is not a token returned by this list operation with the same filters")
		}
		p.After = strings.TrimPrefix(string(b), scope+"\x00")
	}
	return p, nil
}

func NextToken(scope, lastKey string, more bool) string {
	if !more {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(scope + "\x00" + lastKey))
}
