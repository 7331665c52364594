package harness

import (
	"fmt"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// ExpectOneWinner is a spec body shared by every runner of replicas
// (processes or containers): writes racing through different replicas with
// the same If-Match on one upstream (at revision 1). Exactly one wins; the
// others get 409 and the revision moves by one.
func ExpectOneWinner(admins []*Admin, upstreamID string, writers int) {
	path := "/admin/v1/upstreams/" + upstreamID
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer GinkgoRecover()
			defer wg.Done()
			st, _, _ := admins[i%len(admins)].Do("PATCH", path, map[string]any{"name": fmt.Sprintf("n%d", i)}, "If-Match", `"1"`)
			mu.Lock()
			codes[st]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	ExpectWithOffset(1, codes).To(Equal(map[int]int{200: 1, 409: writers - 1}))
	ExpectWithOffset(1, admins[len(admins)-1].JSON("GET", path, nil, 200)["spec_revision"]).To(BeEquivalentTo(2))
}
