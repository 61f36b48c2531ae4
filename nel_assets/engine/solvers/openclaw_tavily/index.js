// nel's Tavily `web_search` provider for OpenClaw (OpenClaw's own Tavily plugin is not on
// the npm registry nel installs from). It posts Tavily's /search body to the base URL nel
// writes into the plugin config: nel's search relay, which adds the API key (the agent never
// holds it), forwards to Tavily (or a Tavily-compatible server) and records the search.

const PARAMETERS = {
  type: "object",
  properties: {
    query: {type: "string", description: "Search query string."},
    count: {type: "integer", description: "Number of results to return (1-10).", minimum: 1, maximum: 10},
  },
  required: ["query"],
};

function pluginConfig(config) {
  return config?.plugins?.entries?.tavily?.config?.webSearch ?? {};
}

async function search(settings, args, signal) {
  const query = typeof args?.query === "string" ? args.query.trim() : "";
  if (!query) throw new Error("query is required");
  const count = Number.isInteger(args?.count) ? Math.min(Math.max(args.count, 1), 10) : 5;
  const base = String(settings.baseUrl ?? "").replace(/\/+$/, "");
  if (!base) throw new Error("the tavily plugin has no webSearch.baseUrl (nel writes it)");
  const started = Date.now();
  const timeout = AbortSignal.timeout(1000 * (settings.timeoutSeconds ?? 30));
  const response = await fetch(`${base}/search`, {
    method: "POST",
    headers: {"content-type": "application/json"},
    body: JSON.stringify({query, max_results: count, search_depth: "basic", topic: "general"}),
    signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`Tavily search failed: HTTP ${response.status}: ${text.slice(0, 300)}`);
  const payload = JSON.parse(text);
  const results = (Array.isArray(payload.results) ? payload.results : []).slice(0, count);
  return {
    query,
    provider: "tavily",
    count: results.length,
    tookMs: Date.now() - started,
    ...(typeof payload.answer === "string" && payload.answer ? {answer: payload.answer} : {}),
    externalContent: {untrusted: true, source: "web_search", provider: "tavily", wrapped: false},
    results: results.map((r) => ({
      title: String(r.title ?? ""), url: String(r.url ?? ""), snippet: String(r.content ?? ""),
    })),
  };
}

const provider = {
  id: "tavily",
  label: "Tavily Search (nel)",
  hint: "Tavily search through nel's search relay",
  onboardingScopes: ["text-inference"],
  requiresCredential: false,
  envVars: [],
  placeholder: "(nel adds the key)",
  signupUrl: "https://tavily.com/",
  docsUrl: "https://docs.openclaw.ai/tools/tavily",
  autoDetectOrder: 70,
  credentialPath: "",
  inactiveSecretPaths: [],
  getCredentialValue: () => undefined,
  setCredentialValue: () => {},
  createTool: (ctx) => ({
    description: "Search the web with Tavily. Returns titles, URLs and snippets of the top results.",
    parameters: PARAMETERS,
    execute: async (args, context) => search(pluginConfig(ctx?.config), args, context?.signal),
  }),
};

export default {
  id: "tavily",
  name: "Tavily (nel)",
  description: "Tavily web search through nel's search relay",
  register(api) {
    api.registerWebSearchProvider(provider);
  },
};
