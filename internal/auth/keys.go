package auth

import "crypto/rand"

// NewAccessKeyID returns a fresh access key ID: prefix plus 16 characters
// of A-Z2-7, the shape AWS key IDs have.
func NewAccessKeyID(prefix string) string {
	return prefix + random(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
}

// NewSecretAccessKey returns a fresh 40-character secret.
func NewSecretAccessKey() string {
	return random(40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
}

// random draws n characters uniformly from alphabet, whose length divides 256.
func random(n int, alphabet string) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
