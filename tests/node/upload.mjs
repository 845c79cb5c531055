// Uploads one file to calculet with tus-js-client, as a Node program would, and prints the upload's URL.
//   node upload.mjs <endpoint> <token> <file> '{"chunkSize": 262144, "overridePatchMethod": true}'
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";

import { Upload } from "tus-js-client";

const [endpoint, token, file, optionsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson || "{}");
const data = fs.readFileSync(file);

const upload = new Upload(data, {
  endpoint,
  headers: { Authorization: `Token ${token}` },
  metadata: {
    kind: "golden",
    version: options.version || "1.0",
    filename: path.basename(file),
    sha256: crypto.createHash("sha256").update(data).digest("hex"),
  },
  chunkSize: options.chunkSize || Infinity, // tus-js-client's default: the whole file in one PATCH
  overridePatchMethod: Boolean(options.overridePatchMethod),
  retryDelays: [],
  onError(error) {
    console.error(String(error));
    process.exit(1);
  },
  onSuccess() {
    console.log(JSON.stringify({ url: upload.url }));
  },
});
upload.start();
