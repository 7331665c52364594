package openai

import "net/http"

// Wrap puts f's writer between the translation and the client's writer,
// so a caller that decides after NewWriter (a captured principal's
// request, known once authenticated) sees the bytes the client is sent.
func (x *Writer) Wrap(f func(http.ResponseWriter) http.ResponseWriter) { x.w = f(x.w) }
