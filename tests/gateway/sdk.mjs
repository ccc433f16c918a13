// tests/gateway/sdk.mjs - kvtier-gateway driven by the AWS SDK for
// JavaScript v3 with its defaults: since 3.729 it sends a CRC32 of every
// upload (a header for bodies of known length, an aws-chunked trailer for
// streams) and checks the checksums of downloads that carry one.
// Run by tests/test_gateway_jssdk.sh: node sdk.mjs ENDPOINT ACCESS SECRET.
import {
	S3Client, CreateBucketCommand, PutObjectCommand, GetObjectCommand,
	HeadObjectCommand, ListObjectsV2Command, CopyObjectCommand,
	DeleteObjectsCommand, DeleteObjectCommand, DeleteBucketCommand,
	CreateMultipartUploadCommand, UploadPartCommand,
	CompleteMultipartUploadCommand, ListBucketsCommand,
} from '@aws-sdk/client-s3';
import { Readable } from 'node:stream';
import { createHash, randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';

const [endpoint, accessKeyId, secretAccessKey] = process.argv.slice(2);
const client = (secret) => new S3Client({
	endpoint, region: 'us-east-1', forcePathStyle: true, maxAttempts: 1,
	credentials: { accessKeyId, secretAccessKey: secret },
});
const s3 = client(secretAccessKey);
// The headers of the last request sent, to check which way the SDK signed it.
let sent = {};
s3.middlewareStack.add((next) => async (args) => {
	sent = { ...args.request.headers };
	return next(args);
}, { step: 'finalizeRequest', priority: 'low', name: 'kvtierRecordHeaders' });
const Bucket = 'js-sdk';
const md5 = (b) => createHash('md5').update(b).digest('hex');
const body = async (out) => Buffer.from(await out.Body.transformToByteArray());
const step = (what) => console.log(`--- ${what}`);

async function expectError(promise, name, status) {
	try {
		await promise;
	} catch (e) {
		assert.equal(e.name, name, `error ${e.name}, expected ${name}`);
		assert.equal(e.$metadata.httpStatusCode, status);
		return;
	}
	assert.fail(`expected ${name}`);
}

step('create bucket, list buckets');
await s3.send(new CreateBucketCommand({ Bucket }));
const buckets = await s3.send(new ListBucketsCommand({}));
assert.ok(buckets.Buckets.some((b) => b.Name === Bucket));

step('put and get, byte-exact, with the default CRC32 of each upload');
for (const size of [0, 1, 4095, 4096, 1 << 20, 8 << 20]) {
	const data = randomBytes(size);
	const key = `sizes/${size}`;
	const put = await s3.send(new PutObjectCommand({ Bucket, Key: key, Body: data }));
	assert.equal(put.ETag, `"${md5(data)}"`, `ETag of ${size} bytes`);
	assert.ok(sent['x-amz-checksum-crc32'], `no CRC32 sent with ${size} bytes`);
	const got = await body(await s3.send(new GetObjectCommand({ Bucket, Key: key })));
	assert.ok(got.equals(data), `${size} bytes differ`);
}

step('a stream of known length: aws-chunked with a CRC32 trailer');
{
	const data = randomBytes(3 * 1024 * 1024 + 17);
	await s3.send(new PutObjectCommand({
		Bucket, Key: 'stream', Body: Readable.from([data.subarray(0, 100000), data.subarray(100000)]),
		ContentLength: data.length,
	}));
	assert.equal(sent['x-amz-content-sha256'], 'STREAMING-UNSIGNED-PAYLOAD-TRAILER');
	assert.equal(sent['x-amz-trailer'], 'x-amz-checksum-crc32');
	const got = await body(await s3.send(new GetObjectCommand({ Bucket, Key: 'stream' })));
	assert.ok(got.equals(data), 'streamed upload differs');
}

step('CRC32C and SHA256 checksums asked for; a wrong one refused');
for (const ChecksumAlgorithm of ['CRC32C', 'SHA256']) {
	const data = randomBytes(70000);
	await s3.send(new PutObjectCommand({ Bucket, Key: `sum/${ChecksumAlgorithm}`, Body: data, ChecksumAlgorithm }));
	const got = await body(await s3.send(new GetObjectCommand({ Bucket, Key: `sum/${ChecksumAlgorithm}` })));
	assert.ok(got.equals(data));
}
await expectError(s3.send(new PutObjectCommand({
	Bucket, Key: 'sum/wrong', Body: Buffer.from('hello'), ChecksumCRC32: 'AAAAAA==',
})), 'BadDigest', 400);
await expectError(s3.send(new HeadObjectCommand({ Bucket, Key: 'sum/wrong' })), 'NotFound', 404);

step('metadata, content type, head, range');
{
	const data = randomBytes(100000);
	await s3.send(new PutObjectCommand({
		Bucket, Key: 'meta key ü+%', Body: data, ContentType: 'application/x-kv',
		Metadata: { layer: '7', model: 'llama' },
	}));
	const head = await s3.send(new HeadObjectCommand({ Bucket, Key: 'meta key ü+%' }));
	assert.equal(head.ContentLength, data.length);
	assert.equal(head.ContentType, 'application/x-kv');
	assert.deepEqual(head.Metadata, { layer: '7', model: 'llama' });
	const part = await s3.send(new GetObjectCommand({ Bucket, Key: 'meta key ü+%', Range: 'bytes=1000-1999' }));
	assert.equal(part.$metadata.httpStatusCode, 206);
	assert.equal(part.ContentRange, `bytes 1000-1999/${data.length}`);
	assert.ok((await body(part)).equals(data.subarray(1000, 2000)));
}

step('write-once: If-None-Match * refuses an existing key');
await s3.send(new PutObjectCommand({ Bucket, Key: 'once', Body: Buffer.from('first'), IfNoneMatch: '*' }));
await expectError(s3.send(new PutObjectCommand({
	Bucket, Key: 'once', Body: Buffer.from('second'), IfNoneMatch: '*',
})), 'PreconditionFailed', 412);
assert.equal((await body(await s3.send(new GetObjectCommand({ Bucket, Key: 'once' })))).toString(), 'first');

step('multipart: three parts, each with its CRC32');
{
	const parts = [randomBytes(5 << 20), randomBytes(5 << 20), randomBytes(1 << 20)];
	const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket, Key: 'mp' }));
	const done = [];
	for (let i = 0; i < parts.length; i++) {
		const up = await s3.send(new UploadPartCommand({
			Bucket, Key: 'mp', UploadId, PartNumber: i + 1, Body: parts[i],
		}));
		done.push({ PartNumber: i + 1, ETag: up.ETag });
	}
	await s3.send(new CompleteMultipartUploadCommand({
		Bucket, Key: 'mp', UploadId, MultipartUpload: { Parts: done },
	}));
	const got = await body(await s3.send(new GetObjectCommand({ Bucket, Key: 'mp' })));
	assert.ok(got.equals(Buffer.concat(parts)), 'multipart object differs');
	const head = await s3.send(new HeadObjectCommand({ Bucket, Key: 'mp' }));
	assert.match(head.ETag, /-3"$/);
}

step('copy, list with a delimiter and pages of two');
await s3.send(new CopyObjectCommand({ Bucket, Key: 'copy/of-stream', CopySource: `${Bucket}/stream` }));
{
	const keys = [];
	let ContinuationToken;
	do {
		const page = await s3.send(new ListObjectsV2Command({ Bucket, Prefix: 'sizes/', MaxKeys: 2, ContinuationToken }));
		keys.push(...(page.Contents ?? []).map((o) => o.Key));
		ContinuationToken = page.NextContinuationToken;
	} while (ContinuationToken);
	assert.equal(keys.length, 6);
	const top = await s3.send(new ListObjectsV2Command({ Bucket, Delimiter: '/' }));
	const prefixes = top.CommonPrefixes.map((p) => p.Prefix).sort();
	assert.deepEqual(prefixes, ['copy/', 'sizes/', 'sum/']);
}

step('a wrong secret is refused');
await expectError(client('wrong').send(new PutObjectCommand({
	Bucket, Key: 'nope', Body: Buffer.from('x'),
})), 'SignatureDoesNotMatch', 403);
await expectError(s3.send(new HeadObjectCommand({ Bucket, Key: 'nope' })), 'NotFound', 404);

step('delete everything, then the bucket');
{
	const all = await s3.send(new ListObjectsV2Command({ Bucket }));
	const res = await s3.send(new DeleteObjectsCommand({
		Bucket, Delete: { Objects: all.Contents.map((o) => ({ Key: o.Key })) },
	}));
	assert.equal(res.Deleted.length, all.Contents.length);
	assert.equal(res.Errors, undefined);
	await s3.send(new DeleteObjectCommand({ Bucket, Key: 'never-there' }));
	await s3.send(new DeleteBucketCommand({ Bucket }));
}
console.log('ok');
