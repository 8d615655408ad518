// The web client's types from schemas/ in one node process (tools/webtypes.py calls it):
// stdin {documents: {name: schema}, openapi: path}; stdout {name: TypeScript}.
import { compile } from "json-schema-to-typescript";
import openapiTS, { astToString } from "openapi-typescript";
import { pathToFileURL } from "node:url";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { documents, openapi } = JSON.parse(input);
const out = {};
for (const [name, schema] of Object.entries(documents)) {
  out[name] = await compile(schema, name, { bannerComment: "", format: false, unknownAny: true, additionalProperties: false });
}
out.openapi = astToString(await openapiTS(pathToFileURL(openapi), { defaultNonNullable: false, silent: true }));
process.stdout.write(JSON.stringify(out));
