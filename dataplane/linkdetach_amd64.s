#include "textflag.h"

// Linux amd64 system call numbers and flags.
#define SYS_close 3
#define SYS_socket 41
#define SYS_sendto 44
#define SYS_recvfrom 45
#define SYS_clone 56
#define SYS_exit_group 231
#define SYS_close_range 436
#define CLONE_VM_SIGCHLD 0x111
#define AF_NETLINK 16
#define SOCK_RAW_CLOEXEC 0x80003
#define NLMSG_ERROR 2
#define CHILD_FAILED 250

// func rawCloneDeleteLink(stack, msg *byte, n uintptr, keep int) (pid uintptr, errno unix.Errno)
//
// Everything the child needs is in registers before the clone: a system
// call keeps every register but AX, CX and R11, and the child must not
// read the arguments through FP, which names the parent's stack.
TEXT ·rawCloneDeleteLink(SB), NOSPLIT|NOFRAME, $0-48
	MOVQ	stack+0(FP), SI
	MOVQ	msg+8(FP), R12
	MOVQ	n+16(FP), R13
	MOVQ	keep+24(FP), R14
	MOVQ	$CLONE_VM_SIGCHLD, DI
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	MOVQ	$SYS_clone, AX
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JCC	failed
	MOVQ	AX, pid+32(FP)
	MOVQ	$0, errno+40(FP)
	RET
failed:
	NEGQ	AX
	MOVQ	$0, pid+32(FP)
	MOVQ	AX, errno+40(FP)
	RET

child:
	// Close every descriptor but keep: close_range (Linux 5.9), else one
	// by one below 4096.
	CMPQ	R14, $0
	JLT	closeall
	JEQ	closeabove
	XORQ	DI, DI
	MOVQ	R14, SI
	DECQ	SI
	XORQ	DX, DX
	MOVQ	$SYS_close_range, AX
	SYSCALL
	CMPQ	AX, $0
	JNE	closeloop
closeabove:
	MOVQ	R14, DI
	INCQ	DI
	MOVQ	$0xffffffff, SI
	XORQ	DX, DX
	MOVQ	$SYS_close_range, AX
	SYSCALL
	CMPQ	AX, $0
	JNE	closeloop
	JMP	open
closeall:
	XORQ	DI, DI
	MOVQ	$0xffffffff, SI
	XORQ	DX, DX
	MOVQ	$SYS_close_range, AX
	SYSCALL
	CMPQ	AX, $0
	JEQ	open
closeloop:
	XORQ	BX, BX
closenext:
	CMPQ	BX, R14
	JEQ	closeskip
	MOVQ	BX, DI
	MOVQ	$SYS_close, AX
	SYSCALL
closeskip:
	INCQ	BX
	CMPQ	BX, $4096
	JLT	closenext

open:
	MOVQ	$CHILD_FAILED, BX
	MOVQ	$AF_NETLINK, DI
	MOVQ	$SOCK_RAW_CLOEXEC, SI
	XORQ	DX, DX
	MOVQ	$SYS_socket, AX
	SYSCALL
	CMPQ	AX, $0
	JLT	exit
	MOVQ	AX, R15
	INCQ	BX
	MOVQ	R15, DI
	MOVQ	R12, SI
	MOVQ	R13, DX
	XORQ	R10, R10
	XORQ	R8, R8
	XORQ	R9, R9
	MOVQ	$SYS_sendto, AX
	SYSCALL
	CMPQ	AX, $0
	JLT	exit
	INCQ	BX
	// The answer, on this stack: struct nlmsghdr, then struct nlmsgerr
	// whose first field is 0 or -errno.
	SUBQ	$64, SP
	MOVQ	R15, DI
	MOVQ	SP, SI
	MOVQ	$64, DX
	XORQ	R10, R10
	XORQ	R8, R8
	XORQ	R9, R9
	MOVQ	$SYS_recvfrom, AX
	SYSCALL
	CMPQ	AX, $20
	JLT	exit
	MOVWLZX	4(SP), AX
	CMPQ	AX, $NLMSG_ERROR
	JNE	exit
	MOVLQSX	16(SP), AX
	NEGQ	AX
	CMPQ	AX, $0
	JLT	exit
	CMPQ	AX, $CHILD_FAILED
	JGE	exit
	MOVQ	AX, BX
exit:
	MOVQ	BX, DI
	MOVQ	$SYS_exit_group, AX
	SYSCALL
	JMP	exit
