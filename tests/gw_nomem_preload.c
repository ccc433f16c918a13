/*
 * tests/gw_nomem_preload.c - an LD_PRELOAD library for test_gateway_nomem.sh:
 * libmicrohttpd's MHD_create_response_from_buffer() fails, as it does when
 * it cannot allocate the response, for every body that holds the bytes of
 * $KVT_NOMEM_BODY. The gateway calls it through the PLT, so this one comes
 * first; every other call goes on to libmicrohttpd's. It touches nothing of
 * the gateway's own code: a gateway without it is the gateway shipped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

struct MHD_Response *MHD_create_response_from_buffer(size_t size, void *buffer,
						     enum MHD_ResponseMemoryMode mode)
{
	static struct MHD_Response *(*real)(size_t, void *, enum MHD_ResponseMemoryMode);
	const char *body = getenv("KVT_NOMEM_BODY");

	/* On failure the buffer stays the caller's, whatever the mode. */
	if (body && *body && buffer && memmem(buffer, size, body, strlen(body)))
		return NULL;
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "MHD_create_response_from_buffer");
	return real ? real(size, buffer, mode) : NULL;
}
